"""A background NVML sampler for online re-planning (only where the trainer has a GPU)."""

from __future__ import annotations

import logging
import threading

from hybridload.planner._nvml import read_gpu

log = logging.getLogger(__name__)


class GpuMonitor:
    """Keeps ``util``: the trainer GPU's kernel-active fraction over the last window."""

    def __init__(self, window_s: float = 1.0, device=None):
        self.window_s, self.device = window_s, device
        self.util: float | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="hybridload-gpu-monitor", daemon=True)

    @classmethod
    def start(cls, window_s: float = 1.0, device=None) -> "GpuMonitor | None":
        """A running monitor of ``device`` (the loader's; None: the default device), or None without NVML."""
        first = read_gpu(window_s=0.2, interval_s=0.1, device=device)
        if not first.available:
            log.info("auto mode without NVML readings: %s", first.reason)
            return None
        mon = cls(window_s, device)
        mon.util = first.util_mean
        mon._thread.start()
        return mon

    def _loop(self) -> None:
        while not self._stop.is_set():
            reading = read_gpu(window_s=self.window_s, interval_s=0.1, device=self.device, sleep=self._stop.wait)
            if reading.available:
                self.util = reading.util_mean

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
