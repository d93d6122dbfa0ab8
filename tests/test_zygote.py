"""tests/support/zygote.py runs a script as ``python script.py`` does: the script is ``__main__``
(``multiprocessing``'s spawn re-imports it), with its argv, working directory, environment and
``sys.path[0]``; it ends through the interpreter's exit (atexit hooks run) with its own status;
past the deadline its process group is killed."""

import textwrap

import pytest

SCRIPT = textwrap.dedent("""
    import atexit, json, multiprocessing, os, sys

    class Here:
        pass

    def child(q):
        q.put(Here.__module__)

    if __name__ == "__main__":
        atexit.register(lambda: print("atexit ran", flush=True))
        ctx = multiprocessing.get_context("spawn")  # re-imports this script as the child's __mp_main__
        q = ctx.Queue()
        p = ctx.Process(target=child, args=(q,))
        p.start()
        spawned = q.get(timeout=120)
        p.join(timeout=120)
        print(json.dumps({"argv": sys.argv, "cwd": os.getcwd(), "env": os.environ.get("ZYGOTE_TEST"),
                          "path0": sys.path[0], "path1": sys.path[1], "main": Here.__module__, "spawned": spawned,
                          "preloaded": "hybridload" in sys.modules}))
        print("to stderr", file=sys.stderr)
        sys.exit(int(sys.argv[1]))
""")


def test_a_script_run_in_the_zygote_sees_what_python_script_py_gives_it(zygote, tmp_path):
    import json

    (tmp_path / "bin").mkdir()
    script = tmp_path / "bin" / "script.py"
    script.write_text(SCRIPT)
    ran = zygote.run(
        script,
        cwd=tmp_path,
        env={"ZYGOTE_TEST": "seen", "PATH": "/usr/bin:/bin", "PYTHONPATH": str(tmp_path / "lib")},
        args=("3",),
        timeout=180,
    )
    assert ran.returncode == 3, ran.stderr
    got = json.loads(ran.stdout.splitlines()[0])
    assert got["argv"] == [str(script), "3"] and got["cwd"] == str(tmp_path) and got["env"] == "seen"
    assert got["path0"] == str(tmp_path / "bin") and got["path1"] == str(tmp_path / "lib")  # its PYTHONPATH
    assert got["main"] == "__main__" and got["spawned"] == "__mp_main__"
    assert got["preloaded"] is False  # hybridload is imported by the script, never by the zygote
    assert ran.stdout.splitlines()[-1] == "atexit ran" and ran.stderr == "to stderr\n"


def test_an_exception_is_exit_1_with_its_traceback_and_the_zygote_runs_the_next_script(zygote, tmp_path):
    script = tmp_path / "raises.py"
    script.write_text("raise KeyError('no such thing')\n")
    ran = zygote.run(script, cwd=tmp_path, env={}, timeout=60)
    assert ran.returncode == 1 and "KeyError: 'no such thing'" in ran.stderr
    script.write_text("print('next')\n")
    ran = zygote.run(script, cwd=tmp_path, env={}, timeout=60)
    assert (ran.returncode, ran.stdout, ran.stderr) == (0, "next\n", "")


def test_a_script_past_its_deadline_is_killed_with_what_it_started_and_named(zygote, tmp_path):
    import os
    import time

    script = tmp_path / "hangs.py"
    script.write_text(
        textwrap.dedent("""
        import subprocess, sys, time
        p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        print(p.pid, flush=True)
        time.sleep(600)
    """)
    )
    t0 = time.monotonic()
    with pytest.raises(TimeoutError, match=r"hangs\.py did not end within 3 s") as info:
        zygote.run(script, cwd=tmp_path, env=dict(os.environ), timeout=3)
    assert time.monotonic() - t0 < 30
    grandchild = int(str(info.value).split("\n")[1])
    deadline = time.monotonic() + 10
    while os.path.exists(f"/proc/{grandchild}") and "Z" not in open(f"/proc/{grandchild}/stat").read().split()[2]:
        assert time.monotonic() < deadline, "the script's own child outlived the kill"
        time.sleep(0.1)


def test_code_runs_as_python_dash_c_with_its_arguments(zygote, tmp_path):
    code = "import json, os, sys; print(json.dumps([sys.argv, sys.path[0], __name__, os.getcwd()]))"
    ran = zygote.run(code=code, cwd=tmp_path, env={}, args=("a", "b"), timeout=60)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.strip() == f'[["-c", "a", "b"], "", "__main__", "{tmp_path}"]'
