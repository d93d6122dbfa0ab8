"""The `hybridload` command line, one module per command (``demo``, ``profile``, ``bench``,
``index``, ``trace_summary`` for ``trace-summary``) under one convention: ``add_parser`` without
importing torch, so ``--help`` answers at once, and ``run``; `COMMANDS` lists them (CONTRIBUTING.md,
"Add a CLI command")."""

from __future__ import annotations

import argparse
import logging
import sys
import warnings

from hybridload.cli._args import Parser, UsageError, fail
from hybridload.cli._commands import bench, demo, index, profile, trace_summary
from hybridload.cli._commands.profile import POLICY_DEFAULTS

log = logging.getLogger("hybridload.cli._commands")

#: The commands, in the order ``hybridload --help`` lists them.
COMMANDS = (demo, profile, bench, index, trace_summary)


def build_parser() -> argparse.ArgumentParser:
    from hybridload import __version__

    p = Parser(
        prog="hybridload",
        description="hybridload's command line: a demo on generated photos, the planner's "
        "profile, a benchmark of the loader's modes, shard manifests for TarShards, and a loader trace's summary.",
    )
    p.add_argument("--version", action="version", version=f"hybridload {__version__}")
    p.add_argument("-v", "--verbose", action="store_true", help="log hybridload's debug messages")
    sub = p.add_subparsers(dest="command", metavar="{" + ",".join(c.NAME for c in COMMANDS) + "}")
    for command in COMMANDS:
        command.add_parser(sub)
    return p


def configure_logging(verbose: bool) -> None:
    """Other libraries' warnings only; hybridload's INFO (DEBUG with -v)."""
    root = logging.getLogger()
    if not root.handlers:
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
        root.addHandler(handler)
    root.setLevel(logging.WARNING)
    logging.getLogger("hybridload").setLevel(logging.DEBUG if verbose else logging.INFO)
    logging.captureWarnings(True)  # warnings.warn(...) too: a log line above the progress bar, not through it
    warnings.formatwarning = _one_line  # that line without the file name and the warning's source line


def _one_line(message, category, filename, lineno, line=None) -> str:
    return f"{category.__name__}: {message}"


def main(argv: list[str] | None = None) -> int:
    """The ``hybridload`` command: run one subcommand and return its exit status.

    Exit statuses: 0 done; 2 a usage mistake (a bad flag or argument, a missing directory, a
    plan file that is not one), one line on stderr; 1 an optional extra is missing (one line
    naming the ``pip install`` that adds it); 130 interrupted (Ctrl-C).

    Args:
        argv: the arguments after ``hybridload``; None: ``sys.argv[1:]``.
    """
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra:  # named by the command's own parser when there is one
        getattr(args, "parser", parser).error(f"unrecognized arguments: {' '.join(extra)}")
    if args.command is None:
        names = [c.NAME for c in COMMANDS]
        parser.error(f"a command is required: {', '.join(names[:-1])} or {names[-1]}")
    from tqdm.contrib.logging import logging_redirect_tqdm  # after parsing: --help and usage errors stay fast

    from hybridload._extras import MissingExtraError
    from hybridload.planner import PlanFormatError

    configure_logging(args.verbose)
    prog = f"hybridload {args.command}"
    try:
        with logging_redirect_tqdm():  # log lines go above the progress bars, never into them
            return args.func(args)
    except (UsageError, PlanFormatError) as exc:
        return fail(prog, str(exc))
    except MissingExtraError as exc:
        fail(prog, str(exc))
        return 1
    except KeyboardInterrupt:
        fail(prog, "interrupted")
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

__all__ = ["COMMANDS", "POLICY_DEFAULTS", "build_parser", "configure_logging", "main"]
