"""The PNG of ``hybridload trace-summary run.json --png out.png``: the first seconds of a loader
trace as one row per worker (Pillow's ``ImageDraw``; Pillow is a dependency, matplotlib is not
needed), for a bug report or a page.

Rows: the trainer's first (``stall`` in red: the training loop waiting for data; the delivery
spans in grey), then every worker, grouped by node, in the order they first worked. On a
worker's row each batch is its ``read`` (blue) then its ``decode+augment`` (green), or one
``batch`` span (teal) where the lane does not tell the two apart; a re-issued copy the merger
dropped is drawn pale. Marked events (``retry``, ``reissue``, ``error``, ``skip``) are
ticks on the trainer's row. ``layout(doc, seconds)`` is pure (the rows and their spans, in
seconds); ``render`` draws it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from PIL import Image, ImageDraw, ImageFont

#: the colours of the legend, by what a span is
COLOURS = {
    "stall": (214, 39, 40),
    "read": (31, 119, 180),
    "decode+augment": (44, 160, 44),
    "work": (23, 190, 207),
    "trainer": (150, 150, 150),
    "dropped": (200, 200, 200),
    "mark": (255, 127, 14),
}
BACKGROUND = (255, 255, 255)
TEXT = (30, 30, 30)
ROW_H = 18  # pixels a row
ROW_GAP = 4  # pixels between rows
LABEL_W = 250  # pixels of the rows' names
RIGHT = 30  # pixels right of the last second (its tick's label)
TOP = 38  # the title and the legend
BOTTOM = 22  # the time axis


@dataclass
class Row:
    """A row of the picture: its name and its spans ``(start_s, end_s, colour key)``."""

    name: str
    spans: list[tuple[float, float, str]] = field(default_factory=list)
    marks: list[float] = field(default_factory=list)


def layout(doc: dict, seconds: float) -> tuple[list[Row], float]:
    """The rows of the first ``seconds`` of a trace, from the trainer's first span on, and the
    time (in the trace's seconds) the picture starts at. The trainer's row first, then each
    worker's row, grouped by node."""
    events = [e for e in doc["traceEvents"] if isinstance(e, dict)]
    nodes = {e.get("pid"): e.get("args", {}).get("name", "?") for e in events if e.get("name") == "process_name"}
    names = {
        (e.get("pid"), e.get("tid")): e.get("args", {}).get("name", "?")
        for e in events
        if e.get("name") == "thread_name"
    }
    spans = sorted((e for e in events if e.get("ph") == "X"), key=lambda e: e["ts"])
    if not spans:
        return [], 0.0
    t0 = spans[0]["ts"] / 1e6
    rows: dict[tuple, Row] = {}
    trainer = next((key for key, name in names.items() if name == "trainer"), None)
    several = len(nodes) > 1  # name each row's node only where there is more than one

    def label(key: tuple) -> str:
        node = nodes.get(key[0], "?").removesuffix(" (trainer)")
        return f"{names.get(key, '?')} @ {node}" if several else names.get(key, "?")

    if trainer is not None:
        rows[trainer] = Row(label(trainer))
    for e in spans:
        key = (e.get("pid"), e.get("tid"))
        start, end = e["ts"] / 1e6 - t0, (e["ts"] + e["dur"]) / 1e6 - t0
        if start > seconds:
            continue
        if key not in rows:
            rows[key] = Row(label(key))
        args = e.get("args", {})
        if e.get("cat") == "work":
            what = args.get("stage", "work") if args.get("kept", True) else "dropped"
        else:
            what = "stall" if e["name"] == "stall" else "trainer"
        rows[key].spans.append((start, min(end, seconds), what))
    if trainer is not None:
        for e in events:
            if e.get("ph") == "i" and 0 <= e["ts"] / 1e6 - t0 <= seconds:
                rows[trainer].marks.append(e["ts"] / 1e6 - t0)
    workers = sorted((k for k in rows if k != trainer), key=lambda k: (k[0], list(rows).index(k)))
    ordered = ([rows[trainer]] if trainer is not None else []) + [rows[k] for k in workers]
    return ordered, t0


def row_top(k: int) -> int:
    """The pixel row where row ``k``'s band begins."""
    return TOP + k * (ROW_H + ROW_GAP)


def render(doc: dict, seconds: float = 2.0, width: int = 1400) -> Image.Image:
    """The picture of the trace's first ``seconds``: ``width`` pixels wide, one band per row."""
    rows, _t0 = layout(doc, seconds)
    height = row_top(len(rows)) + BOTTOM
    img = Image.new("RGB", (width, height), BACKGROUND)
    draw = ImageDraw.Draw(img)
    font = ImageFont.load_default()
    plot_w = width - LABEL_W - RIGHT
    scale = plot_w / seconds

    def x(t: float) -> float:
        return LABEL_W + t * scale

    draw.text((6, 4), f"loader trace: the first {seconds:g} s, one row per worker", fill=TEXT, font=font)
    lx = LABEL_W
    for key in ("stall", "read", "decode+augment", "work", "trainer", "dropped"):
        draw.rectangle([lx, 22, lx + 12, 32], fill=COLOURS[key])
        label = {"trainer": "delivery", "dropped": "dropped copy", "work": "batch"}.get(key, key)
        draw.text((lx + 16, 21), label, fill=TEXT, font=font)
        lx += 24 + int(draw.textlength(label, font=font))
    for k, row in enumerate(rows):
        top = row_top(k)
        draw.text((6, top + 3), _fit(draw, font, row.name, LABEL_W - 12), fill=TEXT, font=font)
        draw.line([LABEL_W, top + ROW_H, width - RIGHT, top + ROW_H], fill=(235, 235, 235))
        for start, end, what in row.spans:
            left, right = x(start), max(x(end), x(start) + 1)
            left += 1 if right - left > 3 else 0  # a white pixel between spans that touch
            draw.rectangle([left, top + 2, right, top + ROW_H - 2], fill=COLOURS[what])
        for t in row.marks:
            draw.polygon([(x(t) - 4, top), (x(t) + 4, top), (x(t), top + 7)], fill=COLOURS["mark"])
    axis = row_top(len(rows)) + 2
    step = _tick(seconds)
    t = 0.0
    while t <= seconds + 1e-9:
        draw.line([x(t), axis, x(t), axis + 4], fill=TEXT)
        draw.text((x(t) + 2, axis + 4), f"{t:g} s", fill=TEXT, font=font)
        t = round(t + step, 6)
    return img


def write(doc: dict, path: str, seconds: float = 2.0) -> int:
    """Save the picture of the trace's first ``seconds`` as a PNG at ``path``; its rows."""
    img = render(doc, seconds)
    img.save(path, format="PNG", optimize=True)
    return len(layout(doc, seconds)[0])


def _tick(seconds: float) -> float:
    """A round step between the axis's ticks: about eight of them."""
    for step in (0.01, 0.02, 0.05, 0.1, 0.2, 0.25, 0.5, 1, 2, 5, 10, 20, 30, 60):
        if seconds / step <= 10:
            return step
    return seconds / 8


def _fit(draw: ImageDraw.ImageDraw, font, text: str, width: int) -> str:
    """``text`` cut with an ellipsis to ``width`` pixels (a row's name only: the trace keeps it whole)."""
    if draw.textlength(text, font=font) <= width:
        return text
    while text and draw.textlength(text + "...", font=font) > width:
        text = text[:-1]
    return text + "..."
