"""Draws docs/figures/architecture.svg, the site's picture of how a batch is made.

    python docs/figures/architecture.py          # rewrites the SVG next to this file

Plain SVG written by hand (no plotting library, nothing fetched): boxes, arrows and text. Edit the
BOXES and ARROWS below, run it, commit both files; tests/test_docs.py checks the SVG is this
script's output.
"""

from __future__ import annotations

from pathlib import Path
from xml.sax.saxutils import escape

OUT = Path(__file__).with_name("architecture.svg")
WIDTH, HEIGHT = 985, 380

#: name -> (x, y, width, height, title, lines below the title, fill)
BOXES = {
    "source": (10, 160, 120, 80, "Source", ["sample refs", "(path, offset)"], "#e8f0fe"),
    "sampler": (150, 160, 160, 80, "Sampler", ["this rank's batches", "(DistributedSampler)"], "#e8f0fe"),
    "dispatch": (330, 160, 140, 80, "Dispatcher", ["window, caps,", "retries, stragglers"], "#fef7e0"),
    "local": (510, 40, 180, 80, "CPU lane", ["processes or threads", "on this machine"], "#e6f4ea"),
    "gpu": (510, 160, 180, 80, "GPU lane", ["DALI or torch (nvJPEG)", "on the local GPU"], "#e6f4ea"),
    "ray": (510, 280, 180, 80, "Ray lane", ["CPU actors", "on other nodes"], "#e6f4ea"),
    "merge": (720, 160, 115, 80, "Merger", ["in order,", "exactly once"], "#fef7e0"),
    "train": (855, 160, 120, 80, "Training loop", ["on the device,", "Normalize there"], "#fce8e6"),
    "planner": (330, 20, 140, 70, "Planner", ["the GPU share", "(plan or auto)"], "#f3e8fd"),
}
#: (from, to, label)
ARROWS = [
    ("source", "sampler", ""),
    ("sampler", "dispatch", ""),
    ("dispatch", "local", ""),
    ("dispatch", "gpu", ""),
    ("dispatch", "ray", ""),
    ("local", "merge", ""),
    ("gpu", "merge", ""),
    ("ray", "merge", "batches"),
    ("merge", "train", ""),
    ("planner", "dispatch", "caps"),
]


def _anchor(box: tuple, toward: tuple) -> tuple[float, float]:
    """Where an arrow leaves ``box`` for ``toward``: the middle of the facing side."""
    x, y, w, h = box[:4]
    tx, ty, tw, th = toward[:4]
    if tx >= x + w:
        return x + w, y + h / 2
    if tx + tw <= x:
        return x, y + h / 2
    return (x + w / 2, y + h) if ty > y else (x + w / 2, y)


def _box(x, y, w, h, title, lines, fill) -> str:
    parts = [
        f'<rect x="{x}" y="{y}" width="{w}" height="{h}" rx="8" fill="{fill}" stroke="#5f6368"/>',
        f'<text x="{x + w / 2}" y="{y + 24}" class="title">{escape(title)}</text>',
    ]
    parts += [f'<text x="{x + w / 2}" y="{y + 44 + 16 * i}">{escape(line)}</text>' for i, line in enumerate(lines)]
    return "\n".join(parts)


def _arrow(a: str, b: str, label: str) -> str:
    (x1, y1), (x2, y2) = _anchor(BOXES[a], BOXES[b]), _anchor(BOXES[b], BOXES[a])
    line = f'<line x1="{x1}" y1="{y1}" x2="{x2}" y2="{y2}" stroke="#3c4043" marker-end="url(#head)"/>'
    if label:
        line += f'\n<text x="{(x1 + x2) / 2 + 18}" y="{(y1 + y2) / 2 - 6}" class="label">{escape(label)}</text>'
    return line


def svg() -> str:
    head = (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
        f'viewBox="0 0 {WIDTH} {HEIGHT}" font-family="sans-serif" font-size="12" text-anchor="middle">\n'
        "<title>hybridload: how a batch is made</title>\n"
        "<style>.title { font-weight: bold; font-size: 14px; } .label { font-style: italic; }</style>\n"
        '<defs><marker id="head" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7" markerHeight="7" '
        'orient="auto-start-reverse"><path d="M 0 0 L 10 5 L 0 10 z" fill="#3c4043"/></marker></defs>'
    )
    body = [_box(*box) for box in BOXES.values()] + [_arrow(*arrow) for arrow in ARROWS]
    return "\n".join([head, *body, "</svg>"]) + "\n"


def main() -> None:
    OUT.write_text(svg())


if __name__ == "__main__":
    main()
