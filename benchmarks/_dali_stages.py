"""DALI's CPU pipeline stage by stage, for ``bench_kernels.py --suite stages``.

DALI's ``executor_statistics()`` reports each operator's memory, not its time, so the time of a
stage is measured as the difference between nested pipelines: ``readers.file`` alone, then
with ``decoders.image_random_crop``, then ``resize`` to 224x224, then ``crop_mirror_normalize``
(mirror always, as the stage suite's ``HorizontalFlip(1.0)``; uint8 CHW: the flip and the
layout in one operator). Each runs with one worker thread, ``device_id=None``, and synchronous
execution (no prefetch), so the process's CPU time across a run is that run's work and none of
it spills into the next contestant; the CPU time per image of each pipeline less that of the
one before is the stage's.
"""

from __future__ import annotations

import math
import time
from pathlib import Path

#: The stages, each the operator the pipeline before it gains.
DALI_STAGES = ("read", "decode", "resize", "flip+layout")


class DaliStages:
    """The nested pipelines over ``folder`` (``n`` JPEGs under class folders), batch
    ``batch_size``; `run` times each over one pass of the folder."""

    def __init__(self, folder: Path, n: int, batch_size: int, size: int = 224, seed: int = 0):
        self.n, self.batch_size = n, batch_size
        self.iterations = math.ceil(n / batch_size)
        self.pipes = [self._build(folder, upto, size, seed) for upto in range(len(DALI_STAGES))]

    def _build(self, folder: Path, upto: int, size: int, seed: int):
        from nvidia.dali import fn, pipeline_def, types

        @pipeline_def(
            batch_size=self.batch_size,
            num_threads=1,
            device_id=None,
            seed=seed,
            exec_async=False,
            exec_pipelined=False,
            prefetch_queue_depth=1,
        )
        def nested():
            out, labels = fn.readers.file(file_root=str(folder), random_shuffle=False, name="Reader")
            if upto >= 1:
                out = fn.decoders.image_random_crop(out, device="cpu", output_type=types.RGB)
            if upto >= 2:
                out = fn.resize(out, resize_x=size, resize_y=size)
            if upto >= 3:
                out = fn.crop_mirror_normalize(out, mirror=1, dtype=types.UINT8, output_layout="CHW")
            return out, labels

        pipe = nested()
        pipe.build()
        if pipe.epoch_size("Reader") != self.n:
            raise RuntimeError(
                f"DALI's reader found {pipe.epoch_size('Reader')} files under {folder}, expected {self.n}"
            )
        pipe.run()  # its buffers allocated before any run is timed
        return pipe

    def run(self, first: int = 0) -> dict[str, float]:
        """{stage: process CPU seconds per image}, the pipelines timed starting at ``first``
        (rotate it round by round, so a change in the box's load hits them alike)."""
        k = len(self.pipes)
        per = [0.0] * k
        for j in [*range(first % k, k), *range(first % k)]:
            t0 = time.process_time()
            for _ in range(self.iterations):
                self.pipes[j].run()
            per[j] = (time.process_time() - t0) / (self.iterations * self.batch_size)
        got = {name: per[j] - (per[j - 1] if j else 0.0) for j, name in enumerate(DALI_STAGES)}
        got["total"] = per[-1]
        return got

    def close(self) -> None:
        self.pipes = []
