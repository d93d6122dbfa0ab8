"""What ``hybridload trace-summary run.json`` prints: the few lines a person reads first of a trace
``loader.trace(path)`` wrote (`hybridload.execution._trace`): the trainer's stall fraction, the
slowest lane and node, the longest waits and what each waited on.

``summarize(doc)`` is pure (the trace's dict in, lines out); ``load(path)`` reads and checks the file.
"""

from __future__ import annotations

import json
from collections import defaultdict
from statistics import mean
from typing import Any

from hybridload.cli._args import UsageError

LONGEST = 3  # waits listed


def load(path: str) -> dict:
    """The trace at ``path``; `UsageError` naming the file for one that is missing or not a trace."""
    try:
        with open(path) as f:
            doc = json.load(f)
    except OSError as exc:
        raise UsageError(f"TRACE: cannot read {path!r} ({exc.strerror or exc})") from None
    except ValueError as exc:
        raise UsageError(f"TRACE: {path!r} is not valid JSON ({exc}); give the file loader.trace(path) wrote") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        raise UsageError(
            f"TRACE: {path!r} has no traceEvents list: not a trace-event file; give the file loader.trace(path) wrote"
        )
    return doc


def summarize(doc: dict) -> list[str]:
    """The summary's lines for a trace's dict (``{"traceEvents": [...]}``)."""
    events = [e for e in doc["traceEvents"] if isinstance(e, dict)]
    nodes = {e.get("pid"): e.get("args", {}).get("name", "?") for e in events if e.get("name") == "process_name"}
    work = batches([e for e in events if e.get("ph") == "X" and e.get("cat") == "work"])
    stalls = [e for e in events if e.get("ph") == "X" and e.get("name") == "stall"]
    if not work or not stalls:
        return ["no batches in this trace: was the loader iterated inside `with loader.trace(path):`?"]
    kept = {_batch_key(e["args"]): e for e in work if e.get("args", {}).get("kept")}
    first = min(e["ts"] for e in stalls)
    last = max(e["ts"] + e["dur"] for e in events if e.get("ph") == "X")
    stalled = sum(e["dur"] for e in stalls)
    lines = [
        f"{len(stalls)} batches taken in {(last - first) / 1e6:.2f} s; the trainer waited {stalled / 1e6:.2f} s "
        f"for them: stall fraction {stalled / max(last - first, 1e-9):.1%}"
    ]
    lines.append("lanes: " + _slowest(work, lambda e: e["args"]["lane"]))
    lines.append("nodes: " + _slowest(work, lambda e: nodes.get(e["pid"], str(e["pid"]))))
    marks: dict[str, list[dict]] = defaultdict(list)
    for e in events:
        if e.get("ph") == "i":
            marks[e["name"]].append(e.get("args", {}))
    if marks:
        lines.append("marked: " + ", ".join(f"{len(v)} {k}" for k, v in sorted(marks.items())))
    lines.append(f"longest waits (of {len(stalls)}):")
    for e in sorted(stalls, key=lambda e: -e["dur"])[:LONGEST]:
        lines.append("  " + _wait(e, kept.get(_batch_key(e["args"])), nodes, marks))
    return lines


def batches(spans: list[dict]) -> list[dict]:
    """One record per copy of a batch from its worker's spans (``read N`` + ``decode N``, or one
    ``batch N``): the first span's fields, ``dur`` the sum, ``read`` the read span's (None: the
    lane drew one span)."""
    out: list[dict] = []
    open_: dict[tuple, dict] = {}  # (row, batch, kept) -> its copy whose decode is still to come
    for e in sorted(spans, key=lambda e: e["ts"]):
        a = e.get("args", {})
        key = (e.get("pid"), e.get("tid"), _batch_key(a), a.get("kept"))
        rec = open_.pop(key, None)
        if rec is None:  # a new copy (seq numbers start again with each pass)
            rec = {**e, "dur": 0.0, "read": None}
            out.append(rec)
        rec["dur"] += e["dur"]
        if a.get("stage") == "read":
            rec["read"] = e["dur"]
            open_[key] = rec
    return out


def _batch_key(args: dict) -> tuple:
    """A batch within the trace: its pass and its seq (seq numbers start again with every pass)."""
    return args.get("pass", 0), args.get("seq")


def _slowest(work: list[dict], key) -> str:
    """Each group's batches and mean work time (and its read and decode+augment parts, where the
    lanes drew them apart), slowest first."""
    groups: dict[str, list[dict]] = defaultdict(list)
    for e in work:
        groups[key(e)].append(e)
    ranked = sorted(groups.items(), key=lambda kv: -mean(e["dur"] for e in kv[1]))
    parts = []
    for name, group in ranked:
        ms = mean(e["dur"] for e in group) / 1e3
        reads = [e["read"] for e in group if e["read"] is not None]
        split = ""
        if len(reads) == len(group):
            read_ms = mean(reads) / 1e3
            split = f" (read {read_ms:.1f}, decode+augment {ms - read_ms:.1f})"
        parts.append(f"{name} {len(group)} batches, {ms:.1f} ms each{split}")
    return "; ".join(parts) + (f" (slowest: {ranked[0][0]})" if len(ranked) > 1 else "")


def _wait(stall: dict, batch: Any, nodes: dict, marks: dict) -> str:
    """One wait: how long, for which batch, and where that batch ran and what befell it."""
    seq, key = stall["args"]["seq"], _batch_key(stall["args"])
    of_pass = f" of pass {key[0]}" if key[0] > 1 else ""  # seq numbers start again with every pass
    at = f"{stall['dur'] / 1e3:.1f} ms at {stall['ts'] / 1e6:.3f} s for batch {seq}{of_pass}"
    if batch is None:
        return at + " (its work is not in the trace)"
    a = batch["args"]
    where = f"lane {a['lane']}, {a['worker']} on {nodes.get(batch['pid'], batch['pid'])}"
    befell = [name for name in ("retry", "reissue", "skip") if any(_batch_key(m) == key for m in marks.get(name, ()))]
    ran = f"its work {batch['dur'] / 1e3:.1f} ms"
    if batch.get("read") is not None:
        ran += f" (read {batch['read'] / 1e3:.1f} ms)"
    return f"{at}: {where}, {ran}" + (f"; {', '.join(befell)}" if befell else "")
