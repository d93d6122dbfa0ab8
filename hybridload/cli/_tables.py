"""Aligned markdown tables for the command line's results."""

from __future__ import annotations

from typing import Sequence


def format_table(header: Sequence[str], rows: Sequence[Sequence[str]], right: Sequence[int] = ()) -> str:
    """A markdown table whose columns line up in a terminal; columns in ``right`` are right-aligned.

    >>> print(format_table(["a", "bb"], [["1", "2"]], right=[1]), end="")
    | a |  bb |
    | - | --: |
    | 1 |   2 |
    """
    cells = [[str(c) for c in header]] + [[str(c) for c in r] for r in rows]
    if any(len(r) != len(header) for r in cells):
        raise ValueError(f"format_table: every row needs {len(header)} cells")
    widths = [
        max(3, *(len(r[i]) for r in cells)) if i in right else max(1, *(len(r[i]) for r in cells))
        for i in range(len(header))
    ]

    def line(r: Sequence[str]) -> str:
        return (
            "| "
            + " | ".join(c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths)))
            + " |"
        )

    rule = "| " + " | ".join(("-" * (w - 1) + ":") if i in right else "-" * w for i, w in enumerate(widths)) + " |"
    return "\n".join([line(cells[0]), rule] + [line(r) for r in cells[1:]]) + "\n"


def key_value_table(rows: Sequence[tuple[str, str]]) -> str:
    """A two-column table: what, value."""
    return format_table(["what", "value"], rows)


def plural(n: int, word: str) -> str:
    """``n`` and ``word``, with an s unless ``n`` is 1.

    >>> plural(1, "thread"), plural(2, "thread"), plural(0, "remote actor")
    ('1 thread', '2 threads', '0 remote actors')
    """
    return f"{n} {word}{'' if n == 1 else 's'}"
