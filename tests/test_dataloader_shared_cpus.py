"""Loaders of one process that share the machine's CPUs: a training loader with a validation
loader run mid-epoch (Lightning's ``val_check_interval``, "evaluate every N steps"), and two
live iterators of one loader, each asking for every CPU of the embedded Ray cluster. torch's
DataLoader runs both (it oversubscribes); the drop-in must never wait for CPUs its own
process holds. Run in a child process with an embedded cluster of the machine's own CPUs
(the test session's shared cluster has spare CPUs), under a deadline. The three cases share that
child and its cluster (a Ray start is most of each case's time), one after the other, each
with loaders of its own: a case's actors left behind would starve the next case's pool."""

import os
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

SETUP = textwrap.dedent("""
    import time, traceback, warnings
    import ray, torch
    import hybridload
    from hybridload.raycluster import _connect as connect
    from torch.utils.data import TensorDataset

    connect.acquire(None)  # the embedded cluster: as many CPUs as this machine
    cpus = int(ray.cluster_resources()["CPU"])
    def loader(lo, shuffle):
        return hybridload.DataLoader(TensorDataset(torch.arange(lo, lo + 24)), batch_size=4, shuffle=shuffle,
                                     num_workers=cpus, distribute_mode=True, head_address=None)
""")

#: each case: a function of the child's that builds its loaders and returns its RESULT words
CASES = {}

CASES["iterators"] = textwrap.dedent("""
    train, val = loader(0, True), loader(100, False)
    seen, vseen, a, b = [], [], [], []
    with warnings.catch_warnings(record=True) as caught, train, val:
        warnings.simplefilter("always")
        for k, (x,) in enumerate(train):
            seen += x.tolist()
            if k == 2:  # validation mid-epoch, while the training pass holds its actors
                vseen += [v for (batch,) in val for v in batch.tolist()]
        first, second = iter(train), iter(train)  # two live iterators of one loader
        for (x,), (y,) in zip(first, second):
            a += x.tolist(); b += y.tolist()
    return (sorted(seen) == list(range(24)), sorted(vseen) == list(range(100, 124)),
            sorted(a) == sorted(b) == list(range(24)), sum("no free CPU" in str(w.message) for w in caught))
""")

CASES["counted"] = textwrap.dedent("""
    train, val = loader(0, True), loader(100, False)
    seen, vseen = [], []
    with warnings.catch_warnings(record=True) as caught, train, val:
        warnings.simplefilter("always")
        for epoch in range(2):  # Lightning's loop: len(loader) steps, the iterator kept, no StopIteration asked
            it = iter(train)
            batches = [next(it)[0] for _ in range(len(train))]
            seen.append(sorted(v for b in batches for v in b.tolist()))
            vseen.append(sorted(v for (b,) in val for v in b.tolist()))  # validation at the epoch's end
    return (all(s == list(range(24)) for s in seen), all(v == list(range(100, 124)) for v in vseen),
            sum("no free CPU" in str(w.message) for w in caught))
""")

CASES["beside"] = textwrap.dedent("""
    train = loader(0, True)
    one = hybridload.DataLoader(TensorDataset(torch.arange(200, 224)), batch_size=4, num_workers=1,
                                distribute_mode=True, head_address=None, timeout=60)
    a, b = [], []
    with warnings.catch_warnings(record=True) as caught, one, train:
        warnings.simplefilter("always")
        first, second = iter(one), iter(train)  # torch's test_multiple_dataloaders: both live, taken in turn
        for (x,), (y,) in zip(first, second):
            a += x.tolist(); b += y.tolist()
        a += [v for (x,) in first for v in x.tolist()]
        b += [v for (y,) in second for v in y.tolist()]
    return (sorted(a) == list(range(200, 224)), sorted(b) == list(range(24)),
            sum("no free CPU" in str(w.message) for w in caught))
""")

SCRIPT = SETUP + "".join(f"def {name}():\n" + textwrap.indent(code, "    ") for name, code in CASES.items())
SCRIPT += textwrap.dedent(f"""
    for name in {list(CASES)!r}:
        start = time.monotonic()
        try:
            words = globals()[name]()
        except Exception:
            traceback.print_exc()
            words = ("raised",)
        print("RESULT", name, round(time.monotonic() - start), *words, flush=True)
""")

#: a case's bound, well under the 120 s a wait for CPUs took (the child's whole run: three times
#: that, and a Ray start)
CASE_S = 100


@pytest.fixture(scope="module")
def results(zygote) -> dict[str, tuple[int, list[str], str]]:
    """Run the cases in one child process with its own embedded cluster: {case: (seconds, the words
    of its RESULT line, the child's stderr)}."""
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")])
    out = zygote.run(code=SCRIPT, cwd=REPO, env=env, timeout=3 * CASE_S + 90)
    lines = [ln.split() for ln in out.stdout.splitlines() if ln.startswith("RESULT")]
    assert out.returncode == 0 and len(lines) == len(CASES), (out.stdout[-500:], out.stderr[-3000:])
    return {name: (int(seconds), words, out.stderr) for _, name, seconds, *words in lines}


def _result(results, case: str) -> list[str]:
    """The words of ``case``'s RESULT line, once it ran within its bound."""
    seconds, words, stderr = results[case]
    assert words != ["raised"], stderr[-3000:]
    assert seconds < CASE_S, f"{case} took {seconds} s (a wait for CPUs its own process holds?)"
    return words


def test_a_validation_loader_and_a_second_iterator_run_beside_a_live_training_pass(results):
    train_ok, val_ok, iterators_ok, warned = _result(results, "iterators")
    assert (train_ok, val_ok, iterators_ok) == ("True", "True", "True")  # every sample once in each
    assert warned == "2"  # one warning per pass that ran in-process (the validation, the second iterator)


def test_a_pass_that_delivered_its_last_batch_leaves_its_cpus_to_the_next_pass(results):
    """Lightning steps len(loader) times and keeps the iterator until the next epoch's: the
    actors of a pass whose last batch is out must go then, or the validation at the epoch's end
    and every later epoch ran in this process (the "no free CPU" warning) for want of them."""
    assert _result(results, "counted") == ["True", "True", "0"]  # every sample once, and every pass on actors


def test_a_second_pool_starts_only_the_actors_the_cpus_left_free_allow(results):
    """A loader of one worker live beside one asking for every CPU (torch's
    ``test_multiple_dataloaders``): the second pool's actors must fit the CPUs the first leaves,
    hosting its worker ids between them, or a batch dealt to an actor that waits for a CPU this
    process holds never comes."""
    assert _result(results, "beside") == ["True", "True", "0"]  # both on actors, every sample once
