"""The test tiers: a module that starts Ray or processes of its own is out of `make test-fast`."""

from pathlib import Path

from conftest import queue_rank, tiers_of

HERE = Path(__file__).parent


def test_a_module_that_starts_ray_or_processes_is_in_that_tier_and_a_plain_one_in_none():
    assert tiers_of("import ray\n") == {"ray"}
    assert tiers_of("def test_x(ray_cluster):\n    pass\n") == {"ray"}
    assert tiers_of("policy = LoaderPolicy(cpu_actors=2)\n") == {"ray"}
    assert tiers_of("DataLoader(ds, num_workers=2, distribute_mode=True)\n") == {"ray"}
    assert tiers_of("codes = run_ranks(_worker, args, 2, timeout_s=60)\n") == {"subprocess"}
    assert tiers_of("subprocess.run([sys.executable, '-c', ''])\n") == {"subprocess"}
    assert tiers_of('LoaderPolicy(local_workers="processes")\n') == {"subprocess"}
    assert tiers_of("def test_x(zygote):\n    zygote.run(script, cwd=d, env={}, timeout=60)\n") == {"subprocess"}
    assert tiers_of("from hybridload import recipe\nrecipe.imagenet_train(224)\n") == set()


def test_a_module_that_names_ray_but_starts_nothing_says_so_and_stays_in_the_fast_tier():
    plans = "policy = LoaderPolicy(cpu_actors=2, ray_address='embedded')\n"
    assert tiers_of(plans) == {"ray"}
    assert tiers_of("pytestmark = pytest.mark.starts_nothing\n" + plans) == set()
    assert tiers_of("# not pytestmark = pytest.mark.starts_nothing\n" + plans) == {"ray"}  # a statement, not a mention
    # a word that merely contains a pattern is not one
    assert tiers_of("array = spray(x)\nmy_subprocess_count = 0\n") == set()


def test_the_suites_process_and_ray_modules_are_out_of_the_fast_tier():
    def tiers(name):
        return tiers_of((HERE / name).read_text(encoding="utf-8"))

    assert "subprocess" in tiers("test_ddp.py")  # gloo ranks
    assert "subprocess" in tiers("test_elastic_resume.py")  # 4 gloo processes
    assert "ray" in tiers("test_faults.py")
    assert tiers("test_sharding.py") == set()


def test_xdist_workers_take_slow_modules_first_then_ray_and_process_ones_and_the_fast_tier_last():
    modules = {
        "fast": set(),
        "procs": {"subprocess"},
        "slow": {"subprocess", "slow"},
        "ray": {"ray", "starts_nothing"},
        "gpu": {"gpu"},
    }
    assert sorted(modules, key=lambda name: queue_rank(modules[name])) == ["slow", "procs", "ray", "fast", "gpu"]
    assert queue_rank(tiers_of("import ray\n")) == queue_rank({"ray"})  # a module's tiers are its markers
