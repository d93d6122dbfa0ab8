"""``hybridload trace-summary run.json``: the few lines to read first of a trace that
``loader.trace(path)`` wrote (the summary is `hybridload.cli.trace_summary`)."""

from __future__ import annotations

import argparse
import sys

#: The subcommand's name on the command line.
NAME = "trace-summary"


def add_parser(sub) -> argparse.ArgumentParser:
    """The ``trace-summary`` subcommand on ``sub`` (the command line's subparsers)."""
    ts = sub.add_parser(
        NAME, help="summarize a loader trace: stall fraction, the slowest lane and node, the longest waits"
    )
    ts.add_argument("trace", metavar="TRACE", help="the trace-event JSON file loader.trace(path) wrote")
    ts.set_defaults(func=run, parser=ts)
    return ts


def run(args: argparse.Namespace) -> int:
    """Print the summary of ``args.trace``."""
    from hybridload.cli import trace_summary

    sys.stdout.write("".join(line + "\n" for line in trace_summary.summarize(trace_summary.load(args.trace))))
    return 0
