"""The loader's counters for ``stats()``, thread-safe, fed by the dispatcher's hooks; under
``on_error="skip"`` one warning a pass past ``skip_warn_fraction`` and its final count at the pass's
end (`loader_report`: ``stats()``'s dict)."""

from __future__ import annotations

import threading
import time
import warnings
from collections import Counter, defaultdict

from hybridload.execution._admission import ShareAdmission
from hybridload.lanes._base import LaneKind
from hybridload.execution._trace import Tracer
from hybridload.lanes._build import pool_reports


class LoaderStats:
    """What a loader counts: images and batches per lane, waits, retries, re-issues, dropped
    duplicates and skipped samples; fed by the dispatcher's hooks, read by ``stats()``.

    Args:
        skip_warn_fraction: warn once in a pass past this fraction of its samples skipped.
    """

    def __init__(self, skip_warn_fraction: float = 1.0):
        self._lock = threading.Lock()
        self.skip_warn_fraction = skip_warn_fraction
        self._pass_samples, self._pass_skipped, self._warned = 0, 0, False
        self._warned_at = 0  # the count the pass's warning stated
        self.trace: Tracer | None = None  # set by `hybridload.execution._trace.recording`; every pass reads it
        self.reset()

    def begin_pass(self, samples: int) -> "LoaderStats":
        """A pass of ``samples`` samples begins: its skips are counted afresh. Returns self."""
        with self._lock:
            self._pass_samples, self._pass_skipped, self._warned = int(samples), 0, False
        return self

    def reset(self) -> None:
        with self._lock:
            self.images: defaultdict[str, int] = defaultdict(int)  # per lane name, as are the next five
            self.batches: defaultdict[str, int] = defaultdict(int)
            self.busy_s: defaultdict[str, float] = defaultdict(float)
            self.retries: defaultdict[str, int] = defaultdict(int)
            self.reissued: defaultdict[str, int] = defaultdict(int)
            self.duplicates: defaultdict[str, int] = defaultdict(int)
            self.skipped: list[tuple] = []
            self.stall_s = 0.0
            self.batches_delivered = 0
            self.started = time.perf_counter()

    def batch_done(self, lane: str, n: int, seconds: float, skipped=()) -> None:
        with self._lock:
            self.images[lane] += n
            self.batches[lane] += 1
            self.busy_s[lane] += seconds
            self.skipped.extend(skipped)
            self._pass_skipped += len(skipped)

    def batch_retried(self, lane: str) -> None:
        with self._lock:
            self.retries[lane] += 1

    def batch_reissued(self, lane: str) -> None:
        with self._lock:
            self.reissued[lane] += 1

    def duplicate_dropped(self, lane: str) -> None:
        with self._lock:
            self.duplicates[lane] += 1

    def record_wait(self, seconds: float) -> None:
        with self._lock:
            self.stall_s += seconds
            self.batches_delivered += 1
            alarm = self._skip_alarm()
        if alarm:  # each substitution was logged already; this is the one warning of the pass
            warnings.warn(alarm, RuntimeWarning, stacklevel=4)  # at the consumer's next() on a loader's pass

    def _skip_alarm(self) -> str:
        """The warning to give now (once a pass), or ''. Called under the lock."""
        n, total = self._pass_skipped, self._pass_samples
        if self._warned or n == 0 or n <= self.skip_warn_fraction * total:
            return ""
        self._warned, self._warned_at = True, n
        stages = Counter(s for (_i, _p, s, _r) in self.skipped[-n:])
        return (
            f"on_error='skip' replaced {n} of this pass's {total} samples with zero images so far "
            f"({100 * n / max(total, 1):.1f}%, over skip_warn_fraction={self.skip_warn_fraction:g}; by stage: "
            f"{dict(stages)}); see stats()['skipped_samples'] for each sample"
        )

    def pass_ended(self) -> None:
        """The pass delivered its last batch: where its warning was given and more were skipped
        since, warn the final count (the count at the threshold understates the loss)."""
        with self._lock:
            n, total, at = self._pass_skipped, self._pass_samples, self._warned_at
            final = self._warned and n > at
            self._warned_at = n
            stages = Counter(s for (_i, _p, s, _r) in self.skipped[-n:]) if final else {}
        if final:
            warnings.warn(
                f"on_error='skip' replaced {n} of this pass's {total} samples with zero images in all "
                f"({100 * n / max(total, 1):.1f}%; {at} when the warning was given; by stage: "
                f"{dict(stages)}); see stats()['skipped_samples'] for each sample",
                RuntimeWarning,
                stacklevel=4,
            )

    def snapshot(self) -> dict[str, tuple[int, float]]:
        """{lane: (images, busy seconds)} so far, read under the lock."""
        with self._lock:
            return {k: (self.images[k], self.busy_s[k]) for k in set(self.images) | set(self.busy_s)}

    def lane_totals(self, names) -> dict:
        """Batches, images and busy seconds of the lanes named ``names``, summed (e.g. what the
        stand-by lanes ran)."""
        with self._lock:
            return {
                "lanes": sorted(names),
                "batches": sum(self.batches[n] for n in names),
                "images": sum(self.images[n] for n in names),
                "busy_s": round(sum(self.busy_s[n] for n in names), 3),
            }

    def as_dict(self, plan=None) -> dict:
        with self._lock:
            elapsed = max(time.perf_counter() - self.started, 1e-9)
            total = sum(self.images.values())
            lanes = sorted(set(self.images) | set(self.retries))
            return {
                "images": total,
                "images_per_s": total / elapsed,
                "elapsed_s": elapsed,
                "lanes": {
                    name: {
                        "images": self.images[name],
                        "batches": self.batches[name],
                        "images_per_s": self.images[name] / elapsed,
                        "share": (self.images[name] / total) if total else 0.0,
                        "retries": self.retries[name],
                    }
                    for name in lanes
                },
                "retries": sum(self.retries.values()),
                "reissued": sum(self.reissued.values()),
                "duplicates_dropped": sum(self.duplicates.values()),
                "skipped": len(self.skipped),
                "skipped_by_stage": dict(Counter(s for (_i, _p, s, _r) in self.skipped)),
                "skipped_samples": [{"index": i, "path": p, "stage": s, "reason": r} for (i, p, s, r) in self.skipped],
                "stall_s": self.stall_s,
                "batches_delivered": self.batches_delivered,
                "plan": plan,
            }


def loader_report(
    stats: LoaderStats,
    lanes: list,
    fallback: list,
    admission: ShareAdmission | None,
    mode: str,
    from_plan_file: bool,
) -> dict:
    """``stats()``'s dict but the loader's position: counters, the plan in force and the actor
    pools; ``admission`` None: no lane built yet."""
    gpu_lane = any(lane.kind is LaneKind.GPU for lane in lanes)
    uncapped = 1.0 if gpu_lane else 0.0  # a GPU lane without a cap takes every batch it can
    share = admission.share(LaneKind.GPU) if admission is not None else None
    online = admission.steer if admission is not None else None
    plan = {"mode": mode, "gpu_share": uncapped if share is None else share, "from_plan_file": from_plan_file}
    if online is not None:
        plan["replans"] = list(getattr(online, "history", ()))  # the online planner's re-plans
    d = stats.as_dict(plan=plan)
    d.update(pool_reports(lanes, fallback, stats))
    return d
