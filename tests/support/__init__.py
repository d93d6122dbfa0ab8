"""Test helpers the tests share, and the tools under tools/ with them (not part of the package;
benchmarks/ runs without them)."""
