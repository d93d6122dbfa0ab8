"""The PNGs of ``hybridload profile`` and ``hybridload bench`` (matplotlib, the ``plot`` extra).

Text is wrapped, never cut: every label reaches matplotlib whole. Figures are built by
``profile_figure`` / ``bench_figure`` (so tests can read their text) and written by ``save``.
"""

from __future__ import annotations

import textwrap
from typing import Any, Sequence

from hybridload.cli._results import ModeResult, Profile
from hybridload._extras import require

DISAGREE_FACTOR = 2.0


def _pyplot() -> Any:
    matplotlib = require("matplotlib", "plot", "writing a plot (--plot)")
    matplotlib.use("Agg")
    return require("matplotlib.pyplot", "plot", "writing a plot (--plot)")


def wrap(text: str, width: int) -> str:
    """``text`` broken into lines of at most ``width`` characters; nothing is dropped."""
    return "\n".join(
        textwrap.fill(part, width, break_long_words=True, break_on_hyphens=False) or part for part in text.split("\n")
    )


def disagreements(
    points: Sequence[tuple[float, float]], predicted: Sequence[float], factor: float = DISAGREE_FACTOR
) -> list[str]:
    """One sentence per checked share whose measured and predicted images/s differ by more than ``factor``."""
    notes = []
    for (share, measured), pred in zip(points, predicted):
        lo, hi = sorted((max(measured, 1e-9), max(pred, 1e-9)))
        if hi / lo > factor:
            notes.append(
                f"at GPU share {share:.2f} the loader measured {measured:.0f} images/s against "
                f"{pred:.0f} predicted ({hi / lo:.1f}x apart): the model misses something there "
                "(start-up, contention, a GPU stand-in); trust the measured points"
            )
    return notes


def profile_figure(prof: Profile) -> Any:
    """Predicted images/s against GPU share, the measured points, and the choice marked clear of the curves."""
    plt = _pyplot()
    from hybridload.planner._calibrate import predict_check
    from hybridload.planner._solver import predict, sweep

    m, lim = prof.measurements, prof.limits
    shares = [s for s, _ in sweep(m, lim, 100)]
    preds = [predict(m, lim, s) for s in shares]
    checked = [predict_check(m, lim, s) for s, _ in prof.points]  # the model for what each check ran
    notes = disagreements(prof.points, checked)
    footer = wrap("\n".join(f"Note: {n}" for n in notes), 110) if notes else ""
    extra_h = 0.16 * (footer.count("\n") + 1) if footer else 0.0
    fig, ax = plt.subplots(figsize=(7.5, 4.6 + extra_h), dpi=110)
    ax.plot(shares, [p["total"] for p in preds], label="predicted total", color="black", lw=2)
    ax.plot(shares, [p["gpu"] for p in preds], label="GPU lane", color="tab:green", lw=1, ls="--")
    ax.plot(
        shares, [p["cpu_local"] + p["cpu_remote"] for p in preds], label="CPU lanes", color="tab:blue", lw=1, ls="--"
    )
    if prof.points:
        ax.scatter(
            [s for s, _ in prof.points],
            [r for _, r in prof.points],
            color="tab:red",
            zorder=5,
            label="measured (loader)",
        )
    chosen, total = prof.plan.gpu_share, prof.plan.predicted.get("total", 0.0)
    top = max([p["total"] for p in preds] + [r for _, r in prof.points] + [total, 1.0])
    ax.set_ylim(0, top * 1.45)  # the band above the curves holds the choice's label
    ax.axvline(chosen, color="tab:orange", ls=":", lw=1.5)
    ax.scatter(
        [chosen],
        [total],
        marker="*",
        s=220,
        color="tab:orange",
        edgecolor="black",
        zorder=6,
        clip_on=False,
        label="chosen split",
    )
    ax.annotate(
        f"chosen GPU share {chosen:.2f}: {total:.0f} images/s predicted",
        xy=(chosen, total),
        xytext=(min(max(chosen, 0.25), 0.75), 0.93),
        textcoords=("data", "axes fraction"),
        ha="center",
        va="top",
        fontsize=9,
        color="black",
        bbox=dict(boxstyle="round", fc="white", ec="tab:orange"),
        arrowprops=dict(arrowstyle="->", color="tab:orange"),
        zorder=7,
    )
    ax.set_xlabel("GPU share of batches")
    ax.set_ylabel("images/s")
    ax.set_title(wrap(f"hybridload profile — GPU lane: {m.gpu_label}", 90), fontsize=9)
    ax.set_xlim(-0.03, 1.03)  # a choice at 0 or 1 stays whole
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    if footer:
        fig.text(0.01, 0.01, footer, fontsize=7, va="bottom", color="tab:red")
    fig.tight_layout(rect=(0, extra_h / (4.6 + extra_h), 1, 1))
    return fig


def bench_figure(results: Sequence[ModeResult]) -> Any:
    """images/s per mode as bars, each with its wait fraction; below, what ran in each mode, whole."""
    plt = _pyplot()
    footer = "\n".join(wrap(f"{r.mode}: {r.label}", 120) for r in results)
    extra_h = 0.15 * (footer.count("\n") + 1) + 0.1
    fig, ax = plt.subplots(figsize=(8, 4 + extra_h), dpi=110)
    rates = [r.images_per_s for r in results]
    colors = [plt.get_cmap("tab10")(i % 10) for i in range(len(results))]
    bars = ax.bar([r.mode for r in results], rates, color=colors)
    for bar, r in zip(bars, results):
        ax.annotate(
            f"{r.images_per_s:.0f} img/s\nwaits {r.wait_fraction:.0%}",
            (bar.get_x() + bar.get_width() / 2, bar.get_height()),
            ha="center",
            va="bottom",
            fontsize=8,
        )
    ax.set_ylabel("images/s")
    ax.set_title(
        f"hybridload bench (consumer step {results[0].step_ms:g} ms)" if results else "hybridload bench", fontsize=10
    )
    ax.set_ylim(0, max(rates + [1]) * 1.25)
    ax.grid(axis="y", alpha=0.3)
    fig.text(0.01, 0.01, footer, fontsize=7, va="bottom")
    fig.tight_layout(rect=(0, extra_h / (4 + extra_h), 1, 1))
    return fig


def save(fig: Any, path: str) -> None:
    """Write ``fig`` as a PNG at ``path`` and free it."""
    plt = _pyplot()
    fig.savefig(path)
    plt.close(fig)


def figure_texts(fig: Any) -> list[str]:
    """Every non-empty text matplotlib draws in ``fig`` (titles, labels, annotations, legend, notes)."""
    from matplotlib.text import Text

    return [t.get_text() for t in fig.findobj(Text) if t.get_text()]
