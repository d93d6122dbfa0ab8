"""The command line: ``hybridload demo | profile | bench | index | trace-summary``.

``_commands`` (``main``, and one module per command: ``add_parser`` and ``run``), ``_args``
(argument types, one-line user errors), ``_tables``, ``_plots``, ``_results`` (what
profile and bench measured, as data), ``_bench`` (the bench command's
runs), ``_profile`` (the profile command's measuring), ``_index`` (the index command's indexing:
shard manifests), ``_trace_summary`` (the trace-summary command's reading of a loader trace),
``_trace_png`` (its ``--png``: the trace's first seconds drawn, one row per worker) and
``demo_data`` (the demo's photo set).
"""

from hybridload.cli._commands import main

__all__ = ["main"]
