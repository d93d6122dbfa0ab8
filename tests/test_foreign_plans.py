"""Nothing is accepted in silence: a plan file from another machine (another GPU or none, node
ids of another cluster, more actors than the cluster here holds) is fitted to this one with a
warning per change; num_workers=-1 is refused as torch refuses it."""

import json
import logging
import warnings

import pytest
import torch
import torch.utils.data as tud

from hybridload import DataLoader, HybridLoader, LoaderPolicy, recipe, sources
from hybridload.planner import Plan
from hybridload.planner._fit import Here, fit_plan

H100 = "NVIDIA H100 80GB HBM3"
NODE_A, NODE_B = "3f9a" * 14, "7c2b" * 14


def foreign_plan(**kw) -> Plan:
    """A plan as `hybridload profile` writes it on an 8-node H100 cluster (recorded fields)."""
    fields = dict(
        gpu_share=0.6,
        cpu_actors={NODE_A: 100, NODE_B: 24},
        local_threads=0,
        window=None,
        predicted={"gpu": 6000.0, "cpu_local": 0.0, "cpu_remote": 4000.0, "total": 10000.0},
        bottleneck="the CPUs",
        reason="recorded",
        measurements={"gpu_available": True, "gpu_name": H100, "gpu_label": "DALI on cuda:0", "gpu_time_bound": True},
    )
    fields.update(kw)
    return Plan(**fields)


def test_a_plan_for_a_gpu_this_machine_lacks_runs_its_share_on_the_cpu_lanes_and_says_so():
    fit = fit_plan(foreign_plan(), Here(gpu_name=None, cpus=2, ray=True, actor_slots=8))
    assert fit.gpu_share == 0.0
    assert any(H100 in n and "has none" in n for n in fit.notes)
    other = fit_plan(foreign_plan(), Here(gpu_name="NVIDIA L4", cpus=2, ray=True, actor_slots=8))
    assert other.gpu_share == 0.6 and any("NVIDIA L4" in n and "may not hold here" in n for n in other.notes)
    same = fit_plan(foreign_plan(cpu_actors={}, local_threads=2), Here(gpu_name=H100, cpus=4))
    assert same.notes == () and (same.gpu_share, same.threads) == (0.6, 2)  # a plan that fits: not a word


def test_actors_beyond_the_cluster_and_unknown_node_ids_are_clamped_and_named():
    here = Here(gpu_name=H100, cpus=2, ray=True, node_ids=frozenset({"aa" * 28}), actor_slots=3)
    fit = fit_plan(foreign_plan(), here)
    assert fit.cpu_actors == 3 and fit.threads == 0
    assert any(NODE_A[:12] in n and NODE_B[:12] in n and "not in this Ray cluster" in n for n in fit.notes)
    assert any("124 Ray actors" in n and "holds 3" in n for n in fit.notes)
    no_ray = fit_plan(foreign_plan(), Here(gpu_name=H100, cpus=2))
    assert no_ray.cpu_actors == 124  # no cluster to measure against: the lanes say they run it here


def test_from_plan_warns_and_the_loader_runs_what_holds_here(photo_root, tmp_path, monkeypatch, caplog):
    """The real path on this GPU-less box: the plan file as written to disk, from_plan, a loader
    that delivers every sample once on the lane that holds here."""
    monkeypatch.delenv("RAY_ADDRESS", raising=False)  # no Ray configured: the actors cannot run here
    path = tmp_path / "plan.json"
    foreign_plan().save(path)
    assert json.loads(path.read_text())["measurements"]["gpu_name"] == H100
    with pytest.warns(UserWarning) as got:
        policy = LoaderPolicy.from_plan(str(path))
    said = " | ".join(str(w.message) for w in got)
    if not torch.cuda.is_available():
        assert "has none" in said and policy.mode == "cpu"
    src = sources.ImageFolder(photo_root)
    with caplog.at_level(logging.WARNING, logger="hybridload"):
        with HybridLoader(src, recipe.imagenet_eval(32), 8, shuffle=False, policy=policy, return_indices=True) as ld:
            seen = [i for _img, _lab, idx in ld for i in idx.tolist()]
            lanes = ld.describe_lanes()
    assert sorted(seen) == list(range(len(src)))
    assert "cpu_actors=124" in caplog.text and "without Ray" in caplog.text and "Ray lane" not in lanes


def test_a_plan_made_here_is_taken_without_a_word(tmp_path):
    path = tmp_path / "plan.json"
    Plan(gpu_share=0.0, local_threads=1, measurements={"gpu_available": False}).save(path)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        policy = LoaderPolicy.from_plan(str(path))
    assert (policy.mode, policy.threads, policy.cpu_actors) == ("cpu", 1, 0)


class Squares(tud.Dataset):
    def __len__(self):
        return 8

    def __getitem__(self, i):
        return torch.tensor([i * i])


@pytest.mark.parametrize("distribute_mode", [False, True])
def test_negative_num_workers_is_refused_as_torch_refuses_it(distribute_mode):
    with pytest.raises(ValueError) as theirs:
        tud.DataLoader(Squares(), batch_size=2, num_workers=-1)
    with pytest.raises(ValueError) as ours:
        DataLoader(Squares(), batch_size=2, num_workers=-1, distribute_mode=distribute_mode)
    assert str(ours.value) == str(theirs.value)


def test_from_plan_on_a_real_cluster_names_its_unknown_nodes_and_clamps_to_its_slots(ray_cluster):
    """The shared 3-node loopback cluster (2 + 1 + 1 CPUs, the trainer's reserve of 1 out):
    the plan's 124 actors on another cluster's node ids become the 3 this one holds."""
    import ray

    cluster, _workers = ray_cluster
    with pytest.warns(UserWarning) as got:
        policy = LoaderPolicy.from_plan(foreign_plan(), ray_address=cluster.address)
    said = " | ".join(str(w.message) for w in got)
    assert NODE_A[:12] in said and "not in this Ray cluster" in said
    slots = int(ray.cluster_resources()["CPU"]) - policy.reserve_local_cpus
    assert policy.cpu_actors == slots == 3 and f"holds {slots}" in said
