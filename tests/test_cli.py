"""The command line: demo end to end, and its manners — a user's mistake is one line on stderr
with a non-zero exit and no traceback; help shows defaults; -v turns on hybridload's loggers only."""

import argparse
import json
import logging
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

import hybridload
from hybridload.cli._commands import build_parser, configure_logging, main
from hybridload._policy import LoaderPolicy
from support.cli_run import run_main


#: ``python -m hybridload`` as ``-c`` code, run in the session's zygote (torch imported there once)
HYBRIDLOAD_MAIN = "import runpy; runpy.run_module('hybridload', run_name='__main__', alter_sys=True)"


def test_demo_with_ray_runs_ray_and_dali_and_reports_images_per_second(tmp_path, zygote):
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}  # the embedded cluster
    proc = zygote.run(
        code=HYBRIDLOAD_MAIN,
        args=(
            "demo",
            "--data",
            str(tmp_path / "d"),
            "--images",
            "48",
            "--batch-size",
            "8",
            "--size",
            "64",
            "--epochs",
            "2",
            "--quiet",
            "--ray",
        ),
        cwd=Path.cwd(),
        timeout=300,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert re.search(r"\| epoch 1 images/s +\| \d+ \(48 images in", proc.stdout), proc.stdout
    assert "GPU cap" in proc.stdout and "GPU share (realised)" in proc.stdout
    assert "Token authentication" not in proc.stderr + proc.stdout  # Ray's banner, silenced for the embedded cluster
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("|")]
    assert len({len(ln) for ln in lines}) == 1, proc.stdout  # the table's columns line up
    shares = re.search(r"lane shares \(realised\) +\| ([^|]*)\|", proc.stdout).group(1)
    ran = re.search(r"what ran[^|]*\| ([^|]*)\|", proc.stdout).group(1)
    assert ("Ray lane" in ran) == ("ray:" in shares) and ("GPU lane" in ran) == ("gpu:" in shares)
    if "Ray lane" in ran:  # the table counts the actors that are ready, and says so (the log counts started ones)
        assert re.search(r"Ray lane: \d+ ready actors on \d+ node", ran), ran
    if "gpu:" in shares:
        assert "DALI CPU-only mode, no GPU visible" in ran


@pytest.fixture(scope="module")
def in_process_demo(tmp_path_factory, zygote):
    """One in-process demo run the tests below read: 40 images in batches of 32 (drop_last=False)."""
    data = tmp_path_factory.mktemp("demo") / "d"
    proc = zygote.run(
        code=HYBRIDLOAD_MAIN,
        args=(
            "demo",
            "--data",
            str(data),
            "--images",
            "40",
            "--batch-size",
            "32",
            "--size",
            "32",
            "--epochs",
            "1",
            "--quiet",
            "--in-process",
            "--mode",
            "cpu",
        ),
        cwd=Path.cwd(),
        env=dict(os.environ),
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def test_demo_in_process_runs_the_in_process_lane_to_the_end(in_process_demo):
    assert "inprocess: 100%" in in_process_demo.stdout and "in-process lane" in in_process_demo.stdout


@pytest.fixture
def places(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    afile = tmp_path / "afile.txt"
    afile.write_text("x")
    bad_json = tmp_path / "bad.json"
    bad_json.write_text("{not json")
    old_plan = tmp_path / "old.json"
    old_plan.write_text('{"gpu_share": 0.5}')
    return {
        "missing": str(tmp_path / "missing"),
        "empty": str(empty),
        "file": str(afile),
        "bad_json": str(bad_json),
        "old_plan": str(old_plan),
    }


ERRORS = [  # (argv with {placeholders}, words the one line must hold)
    (["profile", "{missing}"], ["DATA", "does not exist"]),
    (["profile", "{empty}"], ["DATA", "no class folders"]),
    (["bench", "{file}"], ["DATA", "is a file, not a directory"]),
    (["profile", "{photos}", "--batch-size", "0"], ["--batch-size", "> 0", "'0'"]),
    (["bench", "{photos}", "--batches", "-1"], ["--batches", "'-1'"]),
    (["bench", "{photos}", "--batches", "many"], ["--batches", "'many'"]),
    (["profile", "{photos}", "--max-gpu-util", "1.5"], ["--max-gpu-util", "(0, 1]"]),
    (["profile", "{photos}", "--seconds", "0"], ["--seconds"]),
    (["profile", "{photos}", "--recipe", "resnet"], ["--recipe", "imagenet_train"]),
    (["bench", "{photos}", "--modes", "fast,cpu"], ["--modes", "fast", "single-gpu", "split"]),
    (["bench", "{photos}", "--plan", "{bad_json}"], ["--plan", "not valid JSON"]),
    (["bench", "{photos}", "--plan", "{old_plan}"], ["--plan", "profile"]),
    (["bench", "{photos}", "--plan", "{missing}"], ["--plan", "No such file"]),
    (["demo", "--images", "0"], ["--images"]),
    (["trace-summary", "{bad_json}"], ["TRACE", "not valid JSON", "loader.trace(path)"]),
    (["trace-summary", "{missing}"], ["TRACE", "cannot read"]),
    (["trace-summary", "{old_plan}"], ["TRACE", "no traceEvents"]),
    (["trace-summary", "{bad_json}", "--seconds", "0"], ["--seconds", "> 0"]),
    (["demo", "--data", "{file}"], ["--data", "was not made by hybridload"]),
    (["--frobnicate"], ["unrecognized arguments: --frobnicate"]),
    (["profile", "{photos}", "--frobnicate"], ["hybridload profile", "--frobnicate"]),
    ([], ["command is required"]),
]


@pytest.mark.parametrize("argv,words", ERRORS, ids=[" ".join(a) or "no-command" for a, _ in ERRORS])
def test_a_user_error_is_one_line_on_stderr_and_a_non_zero_exit(argv, words, places, photo_root, capsys):
    argv = [a.format(photos=photo_root, **places) for a in argv]
    code, out, err = run_main(argv, capsys)
    assert code not in (0, None), (out, err)
    assert err.endswith("\n") and err.count("\n") == 1, err
    assert err.startswith("hybridload"), err
    for w in words:
        assert w in err, err


def test_a_user_error_in_a_real_process_has_no_traceback(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "hybridload", "bench", str(tmp_path / "nowhere"), "--quiet"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().count("\n") == 0 and "nowhere" in proc.stderr


def test_version_prints_the_installed_version(capsys):
    code, out, _ = run_main(["--version"], capsys)
    assert code == 0 and out.strip() == f"hybridload {hybridload.__version__}"
    assert re.fullmatch(r"\d+\.\d+\.\d+.*", hybridload.__version__)


def test_help_shows_defaults_and_the_bench_mode_choices():
    text = build_parser()._subparsers._group_actions[0].choices["bench"].format_help()
    flat = " ".join(text.split())
    assert "(default: 50)" in flat and "single-gpu, multi-node, cpu, auto, gpu, split" in flat


def test_bench_modes_accept_the_policy_mode_names(photo_root):
    args = build_parser().parse_args(["bench", photo_root, "--modes", "auto, gpu,split,cpu"])
    assert args.modes == ["auto", "gpu", "split", "cpu"]
    assert build_parser().parse_args(["bench", photo_root]).modes == ["single-gpu", "multi-node", "cpu"]


def test_profile_reserve_local_cpus_defaults_to_the_policy_default(photo_root):
    args = build_parser().parse_args(["profile", photo_root])
    assert args.reserve_local_cpus == LoaderPolicy().reserve_local_cpus
    assert args.max_gpu_util == LoaderPolicy().max_gpu_util and args.gpu_threads == LoaderPolicy().gpu_threads


@pytest.fixture
def restore_logging():
    root, hl = logging.getLogger(), logging.getLogger("hybridload")
    saved = (root.level, list(root.handlers), hl.level)
    yield
    logging.captureWarnings(False)
    root.setLevel(saved[0])
    root.handlers[:] = saved[1]
    hl.setLevel(saved[2])


def test_verbose_turns_on_debug_for_hybridload_loggers_only(restore_logging):
    configure_logging(verbose=True)
    assert logging.getLogger("hybridload._loader").isEnabledFor(logging.DEBUG)
    for other in ("matplotlib", "matplotlib.font_manager", "PIL.PngImagePlugin", "urllib3"):
        assert not logging.getLogger(other).isEnabledFor(logging.DEBUG), other
        assert not logging.getLogger(other).isEnabledFor(logging.INFO), other
    configure_logging(verbose=False)
    assert logging.getLogger("hybridload.cli._commands").isEnabledFor(logging.INFO)
    assert not logging.getLogger("hybridload.cli._commands").isEnabledFor(logging.DEBUG)


def test_log_lines_go_through_tqdm_while_a_command_runs(monkeypatch, capsys, restore_logging):
    from tqdm.contrib.logging import _TqdmLoggingHandler  # what logging_redirect_tqdm installs

    import hybridload.cli._commands as cli

    seen = {}

    def fake_demo(args):
        seen["handlers"] = [type(h) for h in logging.getLogger().handlers]
        return 0

    monkeypatch.setattr(cli.demo, "run", fake_demo)
    assert main(["demo", "--quiet"]) == 0
    assert _TqdmLoggingHandler in seen["handlers"]
    assert all(h is not _TqdmLoggingHandler for h in map(type, logging.getLogger().handlers))  # restored after


def test_a_librarys_warning_becomes_a_log_line_during_a_command(tmp_path):
    code = (
        "import warnings, hybridload.cli._commands as cli\n"
        "def fake(args):\n"
        "    warnings.warn('a library warning', RuntimeWarning)  # SOURCE LINE\n"
        "    return 0\n"
        "cli.demo.run = fake\n"
        "raise SystemExit(cli.main(['demo', '--quiet']))\n"
    )
    script = tmp_path / "warns.py"  # from a file, so Python could show the warning's source line
    script.write_text(code)
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "WARNING py.warnings: RuntimeWarning: a library warning" in proc.stderr.splitlines(), proc.stderr
    assert "SOURCE LINE" not in proc.stderr and "warns.py" not in proc.stderr  # one line: no path, no code


#: what a user types that must answer at once: help, the version, usage mistakes
FAST_CALLS = [
    ["--help"],
    ["--version"],
    ["bench", "--help"],
    ["profile", "--help"],
    ["demo", "--help"],
    ["index", "--help"],
    [],
    ["bench", "/no/such/dir"],
    ["profile", ".", "--batch-size", "0"],
    ["demo", "--no-such-flag"],
]


#: runs each call of argv lists (JSON, argv[1]) in turn in one process, writing after each what
#: it had imported by then: a heavy module seen after call k was imported by call k or before
FAST_PROBE = """
import json, sys
sys.argv[0] = '/usr/local/bin/hybridload'  # as the console script starts
from hybridload.cli import main
for argv in json.loads(sys.argv[1]):
    try:
        status = main(argv)
    except SystemExit as exc:
        status = exc.code
    heavy = sorted(m for m in ('torch', 'numpy', 'ray', 'hybridload._loader', 'hybridload._policy') if m in sys.modules)
    sys.stderr.write(f'\\nIMPORTED {json.dumps(heavy)} STATUS {status} AFTER {json.dumps(argv)}\\n')
"""


def test_help_version_and_usage_errors_answer_without_importing_torch():
    """torch's import alone takes 3-12 s on a loaded machine; these answers need none of it.
    Checked by what the process imported (a wall-time bound would be noise here), all the calls
    in one process (one interpreter start instead of one per call), in the order of FAST_CALLS."""
    proc = subprocess.run(
        [sys.executable, "-c", FAST_PROBE, json.dumps(FAST_CALLS)], capture_output=True, text=True, timeout=120
    )
    seen = re.findall(r"IMPORTED (\[.*\]) STATUS (\S+) AFTER (\[.*\])", proc.stderr)
    assert [json.loads(argv) for _, _, argv in seen] == FAST_CALLS, proc.stderr[-2000:]
    for heavy, status, argv in seen:
        assert heavy == "[]", f"hybridload {' '.join(json.loads(argv))} imported {heavy} before answering"
        assert status in ("0", "2", "None"), f"{argv}: exit status {status}\n{proc.stderr[-2000:]}"


def test_help_needs_no_torch_within_a_generous_time_bound():
    """The installed command, as a user runs it: well under the 3 s torch's import alone takes here."""
    import time

    exe = os.path.join(os.path.dirname(sys.executable), "hybridload")
    t0 = time.perf_counter()
    proc = subprocess.run([exe, "--help"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and "usage: hybridload" in proc.stdout
    assert time.perf_counter() - t0 < 2.5, "hybridload --help took as long as importing torch"


def test_profiles_flag_defaults_are_loader_policys_own():
    from dataclasses import fields

    from hybridload.cli._commands import POLICY_DEFAULTS

    assert POLICY_DEFAULTS == {f.name: f.default for f in fields(LoaderPolicy) if f.name in POLICY_DEFAULTS}


def test_index_help_names_tarshards_image_extensions():
    from hybridload.sources._tar.tarshards import IMAGE_EXTS

    ix = build_parser()._subparsers._group_actions[0].choices["index"]
    assert f"default: TarShards's, {','.join(IMAGE_EXTS)}" in ix.format_help()


@pytest.mark.parametrize("command", [None, "demo", "profile", "bench", "index"])
def test_cli_help_shows_no_restructuredtext_markup(command):
    parser = build_parser()
    if command:
        parser = parser._subparsers._group_actions[0].choices[command]
    text = parser.format_help()
    assert "``" not in text and ":class:" not in text and ":func:" not in text, text


def test_help_shows_a_zero_default_as_it_shows_any_other():
    bench = build_parser()._subparsers._group_actions[0].choices["bench"]
    text = " ".join(bench.format_help().split())
    assert "consumer's time per training step (default: 0.0)" in text, text


def test_demo_table_reports_the_batch_it_delivered(in_process_demo):
    """40 images in batches of 32 (drop_last=False): the last batch the loop took is what the table shows."""
    row = re.search(r"\| last batch delivered +\| ([^|]*)\|", in_process_demo.stdout)
    assert row and row.group(1).strip() == "(8, 3, 32, 32) torch.uint8", in_process_demo.stdout


def test_every_command_is_a_module_of_the_commands_package_with_name_add_parser_and_run():
    """One convention for a command (CONTRIBUTING.md): ``cli/commands/<name>.py`` (a ``-`` in the name an ``_``) with ``NAME``,
    ``add_parser(sub)`` and ``run(args)``, listed in ``COMMANDS``; the parser holds exactly those."""
    import pkgutil

    from hybridload.cli import _commands as commands

    modules = {m.name for m in pkgutil.iter_modules(commands.__path__)}
    assert modules == {c.__name__.rpartition(".")[2] for c in commands.COMMANDS}, "a command module not in COMMANDS"
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    assert list(sub.choices) == [c.NAME for c in commands.COMMANDS]
    for command in commands.COMMANDS:
        assert command.NAME.replace("-", "_") == command.__name__.rpartition(".")[2]  # trace-summary: trace_summary.py
        parser = sub.choices[command.NAME]
        assert parser.get_default("func") is command.run and parser.get_default("parser") is parser


def test_trace_summary_names_the_stall_fraction_the_slowest_lane_and_what_the_longest_wait_waited_on(tmp_path, capsys):
    from hybridload._batch_result import BatchResult
    from hybridload.execution._trace import Tracer

    tracer = Tracer(tmp_path / "run.json")
    t = time.perf_counter()
    batches = [("threads", 10, 0.05), ("ray", 40, 0.10), ("threads", 10, 0.15), ("ray", 300, 0.45)]  # lane, ms, done
    for seq, (lane, ms, at) in enumerate(batches):
        result = BatchResult(None, None, None, seconds=ms / 1e3, worker=f"{lane}-w", node=f"node-{lane}")
        tracer.batch(seq, lane, t + at - ms / 1e3, t + at, result, True)
        if seq == 3:
            tracer.instant("reissue", seq=seq, lane=lane, to="threads", ran_s=0.2)
        tracer.taken(seq, t + at - (0.25 if seq == 3 else 0.005), t + at)  # the trainer waited 5 ms, then 250 ms
    tracer.write()
    code, out, err = run_main(["trace-summary", str(tmp_path / "run.json")], capsys)
    assert code == 0, err
    lines = out.splitlines()
    stall = 0.265 / (0.45 - 0.045)  # the waits over the time from the first wait to the last batch taken
    assert lines[0].endswith(f"stall fraction {stall:.1%}"), lines
    assert "(slowest: ray)" in lines[1] and "(slowest: node-ray)" in lines[2], lines
    assert "1 reissue" in lines[3], lines
    assert lines[5].strip().startswith("250.0 ms") and "batch 3: lane ray, ray-w on node-ray" in lines[5], lines
    assert lines[5].endswith("reissue"), lines


def test_trace_summary_counts_each_passs_batch_once_with_its_read_and_decode_parts(tmp_path, capsys):
    from hybridload._batch_result import BatchResult
    from hybridload.execution._trace import Tracer

    class Pass:  # stands for a pass's merger: the key the trace numbers passes by
        pass

    tracer = Tracer(tmp_path / "run.json")
    t = time.perf_counter()
    passes = [Pass(), Pass()]
    for epoch, key in enumerate(passes):  # two passes: batch 0 and 1 again, on the same worker
        for seq in range(2):
            done = t + 0.1 * (2 * epoch + seq + 1)
            work = 0.04 if (epoch, seq) != (1, 0) else 0.08  # the second pass's batch 0 ran twice as long
            result = BatchResult(None, None, None, seconds=work, worker="w", read_seconds=0.01)
            tracer.batch(seq, "threads", done - 0.09, done, result, True, pass_key=key)
            tracer.taken(seq, done - (0.05 if (epoch, seq) == (1, 0) else 0.001), done, pass_key=key)
    tracer.write()
    code, out, err = run_main(["trace-summary", str(tmp_path / "run.json")], capsys)
    assert code == 0, err
    lines = out.splitlines()
    assert lines[1] == "lanes: threads 4 batches, 50.0 ms each (read 10.0, decode+augment 40.0)", out
    assert "for batch 0 of pass 2: lane threads, w on" in lines[4] and "its work 80.0 ms (read 10.0 ms)" in lines[4], (
        out
    )
    assert "for batch 0: lane threads" in lines[5] and "its work 40.0 ms (read 10.0 ms)" in lines[5], out
