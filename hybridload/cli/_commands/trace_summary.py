"""``hybridload trace-summary run.json [--png out.png]``: the few lines to read first of a trace
that ``loader.trace(path)`` wrote (the summary is `hybridload.cli._trace_summary`), and a picture
of its first seconds, one row per worker (`hybridload.cli._trace_png`)."""

from __future__ import annotations

import argparse
import sys

from hybridload.cli._args import positive_float

#: The subcommand's name on the command line.
NAME = "trace-summary"


def add_parser(sub) -> argparse.ArgumentParser:
    """The ``trace-summary`` subcommand on ``sub`` (the command line's subparsers)."""
    ts = sub.add_parser(
        NAME, help="summarize a loader trace: stall fraction, the slowest lane and node, the longest waits"
    )
    ts.add_argument("trace", metavar="TRACE", help="the trace-event JSON file loader.trace(path) wrote")
    ts.add_argument(
        "--png", metavar="PNG", help="also draw the trace's first seconds as a PNG here, one row per worker"
    )
    ts.add_argument(
        "--seconds", type=positive_float, default=2.0, help="with --png: the seconds drawn, from the trace's first span"
    )
    ts.set_defaults(func=run, parser=ts)
    return ts


def run(args: argparse.Namespace) -> int:
    """Print the summary of ``args.trace``."""
    from hybridload.cli import _trace_summary as trace_summary
    from hybridload.cli._args import UsageError

    doc = trace_summary.load(args.trace)
    sys.stdout.write("".join(line + "\n" for line in trace_summary.summarize(doc)))
    if args.png:
        from hybridload.cli import _trace_png as trace_png

        try:
            rows = trace_png.write(doc, args.png, args.seconds)
        except OSError as exc:
            raise UsageError(f"--png: cannot write {args.png!r} ({exc.strerror or exc})") from None
        sys.stdout.write(
            f"wrote {args.png}: the first {args.seconds:g} s, {rows} rows (the trainer, then each worker)\n"
        )
    return 0
