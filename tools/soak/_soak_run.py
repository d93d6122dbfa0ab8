"""The soak's driver: runs the trainer job life after life, injects each life's faults at their
moments, restarts the job from its checkpoint after a kill or a crash, and notes every process
and shared-memory segment it saw (for the leak check)."""

from __future__ import annotations

import json
import logging
import os
import random
import subprocess
import sys
import time
from pathlib import Path

from _soak_faults import done_kind, inject, remove_flags
from _soak_pools import PoolWatch, killed_pid
from _soak_stop import POOL_WAIT_S, StopAsk, request_stop
from _soak_world import children_of, free_port, kill, owner_pid, shm_segments, start_time

log = logging.getLogger("soak")
TRAINER = Path(__file__).resolve().parent / "_soak_trainer.py"


class Deadline(Exception):
    """The soak's global deadline passed."""


class Driver:
    """One soak's job: its trainer processes (one per rank), the faults injected into it, the
    recovery each took, the crashes it restarted after, what it started (for the leak check)."""

    def __init__(
        self,
        run_dir: Path,
        *,
        seed: int,
        epochs: int,
        paths: list[str],
        labels: list[int],
        storage,
        cluster,
        deadline: float,
        step_s: float = 0.05,
        save_every: int = 3,
        pool_wait_s: float = POOL_WAIT_S,
    ):
        self.run_dir, self.storage, self.cluster, self.deadline = run_dir, storage, cluster, deadline
        self.base = dict(
            run_dir=str(run_dir),
            seed=seed,
            epochs=epochs,
            paths=paths,
            labels=labels,
            storage_options=storage.options if storage else None,
            step_s=step_s,
            save_every=save_every,
            ray_address=cluster.address if cluster else None,
        )
        self.rng = random.Random(seed * 7919 + 1)
        self.seen: dict[int, int | None] = {}  # every descendant seen: pid -> start time
        self.shm: set[str] = set()
        self.events: list[dict] = []  # one per injected fault: kind, what, recovery_s (+ pool_recovery_s)
        self.pool_watch = PoolWatch(run_dir)  # the Ray pools' recovery after actor kills
        self.crashes: list[str] = []
        self.problems: list[str] = []  # what the soak itself could not read: the run fails on them
        self.statuses: list[list] = []
        self.pending: list[tuple] = []  # trainer kills awaiting the new job's first step: (kind, what, time.time())
        self.procs: list[subprocess.Popen] = []
        self.lives = 0
        self._last_note = 0.0
        self.stop = StopAsk(pool_wait_s)  # the job's early stop once the last fault is over

    # -------------------------------------------------------------- bookkeeping
    def note(self, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self._last_note < 0.3:
            return
        self._last_note = now
        self.pool_watch.watch(len(self.procs))
        for pid in children_of(os.getpid()):
            self.seen.setdefault(pid, start_time(pid))
        for p in self.procs:  # the trainers' and their workers' segments
            for pid in (p.pid, *children_of(p.pid)):
                self.shm |= shm_segments(pid)

    def check_time(self) -> None:
        if time.monotonic() > self.deadline:
            raise Deadline()

    def step(self, key: str = "step") -> int:
        """Rank 0's last finished step in this life (-1 before its first); ``key="epoch"``: the
        epoch whose end it reaches next."""
        try:
            return json.loads((self.run_dir / "progress-0.json").read_text())[key]
        except (OSError, ValueError, KeyError):
            return -1

    # -------------------------------------------------------------- a life
    def start(self, lanes: str, world: int) -> None:
        self.pool_watch.keep(len(self.procs))
        for p in self.run_dir.glob("progress-*.json"):
            self.keep_status(p)
            p.unlink()
        remove_flags(self.run_dir)
        life = dict(self.base, lanes=lanes, world=world, port=free_port())
        path = self.run_dir / f"life-{self.lives}.json"
        path.write_text(json.dumps(life))
        logs = self.run_dir / "logs"
        logs.mkdir(exist_ok=True)
        self.procs = []
        for rank in range(world):
            out = open(logs / f"life-{self.lives}-rank-{rank}.log", "w")
            self.procs.append(
                subprocess.Popen(
                    [sys.executable, str(TRAINER), str(path), str(rank)], stdout=out, stderr=subprocess.STDOUT
                )
            )
            out.close()
        log.info("life %d: lanes=%s world=%d pids=%s", self.lives, lanes, world, [p.pid for p in self.procs])
        self.lives += 1

    def keep_status(self, path: Path) -> None:
        """A trainer's (fds, RSS) at each epoch end, for the flatness check."""
        try:
            status = json.loads(path.read_text())["status"]
        except (OSError, ValueError, KeyError):
            return
        if status:
            self.statuses.append(status)

    def stop_all(self) -> None:
        for p in self.procs:
            kill(p.pid)
        for p in self.procs:
            p.wait(timeout=60)

    def exited(self) -> bool:
        """Whether the job is over (any rank exited nonzero: the others are stopped, as torchrun does)."""
        codes = [p.poll() for p in self.procs]
        if any(c not in (None, 0) for c in codes):
            self.stop_all()
            return True
        return all(c == 0 for c in codes)

    def wait_steps(self, target: int, lanes: str, world: int) -> bool:
        """Wait until rank 0 finished step ``target`` of this run; restart the job after a crash.
        False when the training ended first."""
        while self.step() < target:
            self.check_time()
            self.note()
            if self.exited():
                if self.finished():
                    return False
                self.crashed(lanes, world)
            time.sleep(0.02)
        return True

    def consumed(self, what: str, timeout: float = 30) -> bool:
        """Whether the GPU lane met the armed device fault (its flag file gone) within ``timeout``."""
        flags = list(self.run_dir.glob("gpu-fault-*"))
        deadline = time.monotonic() + timeout
        while any(f.exists() for f in flags) and time.monotonic() < deadline and not self.finished():
            self.check_time()
            self.note()
            time.sleep(0.02)
        if any(f.exists() for f in flags):
            remove_flags(self.run_dir)
            log.info("%s: the GPU lane ran no batch after it", what)
            return False
        return True

    def finished(self) -> bool:
        return (self.run_dir / "done.json").exists() and all(p.poll() == 0 for p in self.procs)

    def crashed(self, lanes: str, world: int) -> None:
        tail = ""
        for k, p in enumerate(self.procs):
            if p.returncode not in (0, None, -9):
                text = (self.run_dir / "logs" / f"life-{self.lives - 1}-rank-{k}.log").read_text(errors="replace")
                errors = [line for line in text.splitlines() if "Error" in line or "Exception" in line]
                tail = (errors or text.strip().splitlines() or [f"exit {p.returncode}"])[-1][:300]
        self.crashes.append(tail)
        log.warning("life %d: the job crashed (%s); restarting it from its checkpoint", self.lives - 1, tail)
        self.start(lanes, world)

    def recovery(self, before: int, t_fault: float, lanes: str, world: int) -> float:
        """Seconds from the fault to the next step the job finished (after a restart: its first)."""
        while self.step() <= before and not self.finished():
            self.check_time()
            self.note()
            if self.exited() and not self.finished():
                self.crashed(lanes, world)
                before = -1
            time.sleep(0.02)
        return time.monotonic() - t_fault

    def run(self, lives: list[dict]) -> None:
        """Every life of the schedule, then the job to its end (faults left when the training
        ended first are not injected, nor counted)."""
        started = False
        for n, life in enumerate(lives):
            lanes, world = life["lanes"], life["world"]
            if not started:
                self.start(lanes, world)
            started, base = False, -1  # base: rank 0's step the next fault counts from
            for f in life["faults"]:
                if f["gap"]:
                    self.settle(lanes, world)
                    if base < 0:
                        if not self.wait_steps(0, lanes, world):
                            return self.to_the_end()
                        base = self.step()
                    base += f["gap"]
                    if not self.wait_steps(base, lanes, world):
                        return self.to_the_end()
                if self.finished():  # the training ended: the faults left are not injected (each waited 30 s)
                    return self.to_the_end()
                time.sleep(f["delay"])
                self.note(force=True)
                before_kill = self.pool_watch.losses_now()
                what = inject(
                    f["kind"],
                    f,
                    rng=self.rng,
                    trainers=[p.pid for p in self.procs],
                    run_dir=self.run_dir,
                    cluster=self.cluster,
                    storage=self.storage,
                    done=self.finished,
                )
                t0, before = time.monotonic(), self.step()  # recovery counts from the fault's end (a restarted server)
                t0_wall = time.time()
                if f["kind"] == "trainer_kill":  # the other ranks go with it, as under torchrun
                    self.stop_all()
                    self.start(lives[n + 1]["lanes"], lives[n + 1]["world"])
                    self.pending.append((f["kind"], what, time.time()))  # recovered at the new job's first step
                    started = True
                    break  # a kill ends the life
                if f["kind"] == "gpu_fault" and not self.consumed(what):
                    what = ""
                if not what:
                    log.info("fault %s: nothing to hit, not counted", f["kind"])
                else:
                    self.record(f["kind"], what, self.recovery(before, t0, lanes, world), t0_wall)
                    if f["kind"].startswith("actor_kill"):
                        rank = self.rank_of_actor(what)
                        self.events[-1]["rank"] = rank
                        self.pool_watch.opened(self.events[-1], before_kill, t0_wall, rank)
        return self.to_the_end()

    def rank_of_actor(self, what: str) -> int | None:
        """The rank whose pool the killed actor (``what``: the kill, in words) belonged to: its
        worker's job's driver is that rank's trainer (`_soak_world.owner_pid`); None when Ray's
        log files do not say."""
        pid = killed_pid(what)
        owner = None if pid is None or self.cluster is None else owner_pid(self.cluster.logs(), pid)
        trainers = [p.pid for p in self.procs]
        return trainers.index(owner) if owner in trainers else None

    def settle(self, lanes: str, world: int) -> None:
        """The faults that hit the job while it started recover at its first step, at the time
        the trainer wrote for it (this wait may end later). A progress without that time is a
        problem of the run, never timed as now."""
        if self.pending:
            self.recovery(-1, 0.0, lanes, world)
            try:
                first = json.loads((self.run_dir / "progress-0.json").read_text())["t_first"]
            except (OSError, ValueError, KeyError):
                first = None
            for kind, what, t0 in self.pending:
                if first is None:
                    self.problems.append(
                        f"fault {kind} ({what}): the resumed job's progress-0.json has no first-step time"
                        " (t_first), so its recovery is unknown"
                    )
                else:
                    self.record(kind, what, max(0.0, first - t0), t0)
            self.pending = []

    def record(self, kind: str, what: str, recovery_s: float, at: float) -> None:
        """A fault injected at ``at`` (time.time()) and recovered ``recovery_s`` later."""
        kind = done_kind(kind, what)
        self.events.append({"kind": kind, "what": what, "recovery_s": round(recovery_s, 3), "at": round(at, 3)})
        log.info("fault %-20s %s; recovered in %.2f s", kind, what, recovery_s)

    def to_the_end(self) -> None:
        """The job to its end: once the last fault is over, asked to stop a few epochs on."""
        if self.pending:
            self.settle(self._life_arg("lanes"), self._life_arg("world"))
        calm = time.monotonic()
        while not self.finished():
            self.check_time()
            self.note()
            kills = len(self.pool_watch.open_kills)
            last = self.stop.update(self.step("epoch"), open_kills=kills, waited_s=time.monotonic() - calm)
            if last is not None:
                request_stop(self.run_dir, last)
                log.info("the last fault is over: the job is asked to stop after epoch %d", last)
            if self.exited() and not self.finished():
                self.crashed(self._life_arg("lanes"), self._life_arg("world"))
            time.sleep(0.05)
        for p in self.procs:
            p.wait(timeout=60)
        self.pool_watch.keep(len(self.procs))
        for p in self.run_dir.glob("progress-*.json"):
            self.keep_status(p)

    def _life_arg(self, key: str):
        return json.loads((self.run_dir / f"life-{self.lives - 1}.json").read_text())[key]
