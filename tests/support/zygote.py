"""Run a script as ``python script.py`` (or code as ``python -c``) would, in a child forked from an interpreter that has
already imported torch, numpy and Pillow (and nothing of hybridload, Ray or DALI).

Why: a fresh interpreter spends 2-3 CPU-seconds importing torch before the script's first line;
a test that runs many short scripts as written (the documentation's blocks) pays it each time.
The child is what ``python script.py`` gives the script: ``__main__`` is the script (its classes
pickle and ``multiprocessing``'s spawn re-imports it), ``sys.argv[0]`` and ``sys.path[0]`` are the
script's, ``sys.path`` follows its ``PYTHONPATH``, its environment and working directory are the caller's, its stdout and stderr (file
descriptors 1 and 2, inherited by what it starts) go to files, and it ends through the
interpreter's own exit (atexit hooks run: Ray's shutdown, the loaders' close). Every hybridload,
Ray and DALI import happens in the child, as in a fresh process. Not for a test of the
interpreter's start or of what torch's import reads from the environment.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

#: the zygote: imports the heavy third-party libraries, then forks a child per request line
#: (JSON: script or code, args, cwd, env, out, err) and answers each with a line {"pid": ...} when
#: it started and {"status": ...} when it ended (os.waitstatus_to_exitcode)
ZYGOTE = r"""
import json, os, runpy, signal, sys, traceback, types
import numpy, PIL.Image, torch  # noqa: F401
assert not [m for m in sys.modules if m.split(".")[0] in ("hybridload", "ray", "nvidia")]
ours = [os.path.abspath(p) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
base = [p for p in sys.path[1:] if os.path.abspath(p) not in ours]  # the interpreter's own entries
for line in sys.stdin:
    req = json.loads(line)
    pid = os.fork()
    if pid == 0:
        os.setsid()  # a group of its own: what the script starts is killed with it
        out = os.open(req["out"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        err = os.open(req["err"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(out, 1)
        os.dup2(err, 2)
        os.close(out)
        os.close(err)
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.close(devnull)
        sys.stdin = open(0, closefd=False)
        os.chdir(req["cwd"])
        os.environ.clear()
        os.environ.update(req["env"])
        theirs = [os.path.abspath(p) for p in req["env"].get("PYTHONPATH", "").split(os.pathsep) if p]
        if req["code"] is None:  # python script.py
            sys.argv = [req["script"], *req["args"]]
            sys.path[:] = [os.path.dirname(os.path.abspath(req["script"])), *theirs, *base]
        else:  # python -c code
            sys.argv = ["-c", *req["args"]]
            sys.path[:] = ["", *theirs, *base]
        code = 0
        try:
            if req["code"] is None:
                runpy.run_path(req["script"], run_name="__main__")
            else:
                main = types.ModuleType("__main__")
                sys.modules["__main__"] = main
                exec(compile(req["code"], "<string>", "exec"), main.__dict__)
        except SystemExit as exc:
            code = exc.code
        except BaseException:
            traceback.print_exc()
            code = 1
        sys.exit(code)  # the interpreter's own exit: atexit hooks, flushed streams
    print(json.dumps({"pid": pid}), flush=True)
    _, status = os.waitpid(pid, 0)
    print(json.dumps({"status": os.waitstatus_to_exitcode(status)}), flush=True)
"""


@dataclass(frozen=True)
class Ran:
    """What a script run left: its exit status and its output."""

    returncode: int
    stdout: str
    stderr: str


class Zygote:
    """One zygote process; ``run`` scripts in it one at a time; ``close`` ends it."""

    def __init__(self, python: str = sys.executable):
        self._proc = subprocess.Popen([python, "-c", ZYGOTE], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self._buf = b""
        self._dir = Path(tempfile.mkdtemp(prefix="zygote-"))

    def run(
        self,
        script: Path | None = None,
        *,
        code: str | None = None,
        cwd: Path,
        env: dict,
        args: tuple = (),
        timeout: float,
    ) -> Ran:
        """``python script *args`` (or ``python -c code *args``) in ``cwd`` with ``env``; past ``timeout``
        seconds its process group is killed and TimeoutError names the script with what it printed."""
        assert (script is None) != (code is None), "a script or code"
        out, err = self._dir / "stdout", self._dir / "stderr"  # not in cwd: the script may list it
        req = dict(script=str(script or "-c"), code=code, args=list(args), cwd=str(cwd), env=dict(env))
        req.update(out=str(out), err=str(err))
        self._proc.stdin.write(json.dumps(req) + "\n")
        self._proc.stdin.flush()
        pid = json.loads(self._read_line(30))["pid"]
        try:
            status = json.loads(self._read_line(timeout))["status"]
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
            self._read_line(30)
            raise TimeoutError(
                f"{script} did not end within {timeout} s:\n{_text(out)[-3000:]}\n{_text(err)[-3000:]}"
            ) from None
        return Ran(status, _text(out), _text(err))

    def _read_line(self, timeout: float) -> str:
        """The zygote's next answer line, read from the pipe itself (no buffer select cannot see)."""
        deadline = time.monotonic() + timeout
        fd = self._proc.stdout.fileno()
        while b"\n" not in self._buf:
            ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                raise TimeoutError
            chunk = os.read(fd, 4096)
            if not chunk:
                raise RuntimeError(f"the zygote ended (exit {self._proc.wait(timeout=30)})")
            self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        return line.decode()

    def close(self) -> None:
        shutil.rmtree(self._dir, ignore_errors=True)
        self._proc.stdin.close()
        try:
            self._proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait(timeout=30)


def _text(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except FileNotFoundError:
        return ""
