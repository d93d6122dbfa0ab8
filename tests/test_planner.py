"""The planner: solver properties on recorded measurement sets, the NVML reader on recorded
readings (a fake NVML module — no NVIDIA device exists on this machine, so this is the only
fake in the suite), the no-NVML path for real, plan files, and online re-planning math."""

import itertools
import json
import math

import numpy as np
import pytest

from hybridload._policy import usable_cpus

from hybridload import LoaderPolicy
from hybridload.planner import (
    GpuUnavailable,
    Limits,
    Measurements,
    NodeRate,
    Plan,
    PlanFormatError,
    predict,
    read_gpu,
    solve,
    sweep,
)
from hybridload.planner._online import LaneSample, rebalance

# ---------------------------------------------------------------- recorded measurement sets
NO_GPU = Measurements(nodes=(NodeRate("local", 6, 300.0, True),), gpu_label="none: NVML not found")
CPU_BOUND = Measurements(
    nodes=(NodeRate("local", 4, 320.0, True), NodeRate("n1", 8, 300.0)),
    gpu_rate=900.0,
    gpu_util=0.85,
    gpu_available=True,
    gpu_cpu_cost=0.3,
    gpu_label="A100",
)
GPU_BOUND = Measurements(
    nodes=(NodeRate("local", 2, 310.0, True),),
    gpu_rate=4000.0,
    gpu_util=0.3,
    gpu_available=True,
    gpu_cpu_cost=0.6,
    gpu_label="H100",
)
MANY_REMOTE = Measurements(
    nodes=(NodeRate("local", 4, 330.0, True),) + tuple(NodeRate(f"n{k}", 32, 290.0 + k) for k in range(6)),
    gpu_rate=3500.0,
    gpu_util=0.5,
    gpu_available=True,
    gpu_cpu_cost=0.5,
    gpu_label="H100",
)
STAND_IN = Measurements(
    nodes=(NodeRate("local", 2, 259.0, True),),
    gpu_rate=450.0,
    gpu_available=True,
    gpu_cpu_cost=1.82,
    gpu_label="DALI CPU-only mode",
    gpu_time_bound=False,
)
SETS = {
    "no-gpu": NO_GPU,
    "cpu-bound": CPU_BOUND,
    "gpu-bound": GPU_BOUND,
    "many-remote": MANY_REMOTE,
    "stand-in": STAND_IN,
}
LIMITS = [
    Limits(),
    Limits(max_gpu_util=0.6),
    Limits(demand=800.0),
    Limits(demand=50000.0),
    Limits(prefer=("gpu", "local", "remote")),
]


def capacity(m, lim):
    cpu = sum(n.cpus * n.per_core for n in m.nodes)
    gpu = 0.0
    if m.gpu_available:
        gpu = m.gpu_rate if not m.gpu_time_bound else m.gpu_rate * max(0.0, lim.max_gpu_util - m.gpu_util)
    return cpu + gpu, gpu


@pytest.mark.parametrize("name,lim", list(itertools.product(SETS, LIMITS)))
def test_plan_never_exceeds_demand_or_capacity_and_respects_caps(name, lim):
    m = SETS[name]
    plan = solve(m, lim)
    total_cap, gpu_cap = capacity(m, lim)
    pred = plan.predicted
    assert pred["total"] <= total_cap + 1e-6
    if lim.demand is not None:
        assert pred["total"] <= lim.demand + 1e-6
    assert pred["gpu"] <= gpu_cap + 1e-6  # max_gpu_util / lane rate respected
    local = next(n for n in m.nodes if n.is_trainer)
    assert pred["cpu_local"] <= local.cpus * local.per_core + 1e-6
    assert plan.local_threads <= local.cpus  # the reserve is already out of local.cpus
    for node, count in plan.cpu_actors.items():
        assert count <= next(n.cpus for n in m.nodes if n.node_id == node)
    assert 0 <= plan.gpu_share <= 1
    assert math.isclose(pred["gpu"] + pred["cpu_local"] + pred["cpu_remote"], pred["total"], rel_tol=1e-6, abs_tol=0.05)
    assert plan.reason and plan.bottleneck
    # the chosen share is the best of the sweep
    assert pred["total"] >= max(t for _, t in sweep(m, lim)) - 0.05


@pytest.mark.parametrize("name", list(SETS))
def test_more_remote_cpus_never_lower_predicted_throughput(name):
    m = SETS[name]
    for lim in LIMITS:
        before = solve(m, lim).predicted["total"]
        more = Measurements(**{**m.__dict__, "nodes": m.nodes + (NodeRate("extra", 16, 250.0),)})
        assert solve(more, lim).predicted["total"] >= before - 1e-6


def test_no_gpu_means_share_zero_and_says_why():
    plan = solve(NO_GPU)
    assert plan.gpu_share == 0 and "no GPU lane" in plan.reason


def test_training_using_the_gpu_above_max_util_leaves_it_out():
    busy = Measurements(**{**GPU_BOUND.__dict__, "gpu_util": 0.95})
    plan = solve(busy, Limits(max_gpu_util=0.9))
    assert plan.gpu_share == 0 and "no GPU time" in plan.reason


def test_cost_order_prefers_local_then_gpu_then_remote_under_a_demand():
    plan = solve(MANY_REMOTE, Limits(demand=2000.0))
    assert plan.predicted["total"] == pytest.approx(2000.0, rel=1e-3)
    assert plan.predicted["cpu_remote"] == pytest.approx(0.0, abs=1.0)  # local + GPU suffice
    assert plan.total_actors == 0 and plan.local_threads == 4


def test_stand_in_gpu_lane_that_costs_more_cores_than_it_saves_gets_no_share():
    plan = solve(STAND_IN)
    assert plan.gpu_share == 0 and "trainer's cores do more on the CPU lane" in plan.reason


def test_predicted_curve_is_the_plot_data():
    pts = sweep(GPU_BOUND, Limits(), points=10)
    assert len(pts) == 11 and pts[0][0] == 0 and pts[-1][0] == 1
    assert pts[0][1] == pytest.approx(predict(GPU_BOUND, Limits(), 0.0)["total"])


# ---------------------------------------------------------------- plan files
def test_plan_json_round_trip(tmp_path):
    plan = solve(MANY_REMOTE, Limits(demand=9000.0), window=12)
    path = tmp_path / "plan.json"
    plan.save(path)
    again = Plan.load(path)
    assert again == Plan.from_dict(json.loads(path.read_text()))
    assert again.gpu_share == plan.gpu_share and again.cpu_actors == plan.cpu_actors and again.window == 12


@pytest.mark.parametrize(
    "mutate,msg",
    [
        (lambda d: d.update(format_version=99), "format_version 99"),
        (lambda d: d.pop("format_version"), "format_version None"),
        (lambda d: d.update(gpu_share=1.5), "gpu_share must be in"),
        (lambda d: d.update(surprise=1), "unknown fields"),
        (lambda d: d.update(cpu_actors={"n": -1}), "cpu_actors"),
    ],
)
def test_bad_plan_files_get_a_clear_error(tmp_path, mutate, msg):
    d = solve(NO_GPU).to_dict()
    mutate(d)
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(d))
    with pytest.raises(PlanFormatError, match=msg):
        Plan.load(path)


def test_a_pickle_is_not_a_plan(tmp_path):
    import pickle

    path = tmp_path / "plan.json"
    path.write_bytes(pickle.dumps(solve(NO_GPU)))
    with pytest.raises((PlanFormatError, UnicodeDecodeError)):
        Plan.load(path)


def test_policy_from_plan(tmp_path):
    p = Plan(gpu_share=0.4, cpu_actors={"n1": 3}, local_threads=2, window=6)
    pol = LoaderPolicy.from_plan(p)
    assert (pol.mode, pol.gpu_share, pol.cpu_actors, pol.window) == ("split", 0.4, 5, 6)
    path = tmp_path / "p.json"
    Plan(gpu_share=0.0, local_threads=2).save(path)
    pol = LoaderPolicy.from_plan(str(path), on_error="skip")
    assert (pol.mode, pol.cpu_actors, pol.threads, pol.on_error) == ("cpu", 0, min(2, usable_cpus()), "skip")
    assert LoaderPolicy.from_plan(Plan(gpu_share=1.0)).mode == "gpu"


# ---------------------------------------------------------------- NVML, recorded readings
class FakeNVML:
    """Replays recorded NVML readings (utilization in %, bytes), keyed by UUID."""

    class NVMLError(Exception):
        pass

    def __init__(self, devices, fail_init=None, mig=False, mig_devices=(), decoder=None):
        self.devices = devices  # list of dicts: uuid, name, util (list of %), free, total
        self.mig_devices = list(mig_devices)  # MIG instance UUIDs (handles "mig0", "mig1", ...)
        self.decoder = decoder
        self.fail_init = fail_init
        self.mig = mig
        self.shutdown_called = False
        self._pos = {}

    def nvmlInit(self):
        if self.fail_init:
            raise self.fail_init

    def nvmlShutdown(self):
        self.shutdown_called = True

    def nvmlDeviceGetCount(self):
        return len(self.devices)

    def nvmlDeviceGetHandleByIndex(self, i):
        return i

    def nvmlDeviceGetHandleByUUID(self, uuid):
        uuid = uuid.decode() if isinstance(uuid, bytes) else uuid
        for i, d in enumerate(self.devices):
            if d["uuid"] == uuid:
                return i
        if uuid in self.mig_devices:
            return f"mig{self.mig_devices.index(uuid)}"
        raise self.NVMLError("Not Found")

    def nvmlDeviceIsMigDeviceHandle(self, h):
        return isinstance(h, str)

    def nvmlDeviceGetDecoderUtilization(self, h):
        if self.decoder is None:
            raise self.NVMLError("Not Supported")
        return (self.decoder, 167000)

    def nvmlDeviceGetMigMode(self, h):
        return (1 if self.mig else 0, 0)

    def nvmlDeviceGetUtilizationRates(self, h):
        seq = self.devices[h]["util"]
        k = self._pos.get(h, 0)
        self._pos[h] = k + 1

        class U:
            gpu = seq[k % len(seq)]

        return U()

    def nvmlDeviceGetMemoryInfo(self, h):
        d = self.devices[h]

        class M:
            free, total = d["free"], d["total"]

        return M()

    def nvmlDeviceGetUUID(self, h):
        return self.mig_devices[int(h[3:])] if isinstance(h, str) else self.devices[h]["uuid"]

    def nvmlDeviceGetName(self, h):
        return self.devices[h]["name"]

    def nvmlDeviceGetIndex(self, h):
        return h

    def nvmlDeviceGetJpgUtilization(self, h):
        return (12, 167000)


DEVICES = [
    dict(uuid="GPU-aaaa", name="NVIDIA H100", util=[10, 20, 30, 40], free=70 << 30, total=80 << 30),
    dict(uuid="GPU-bbbb", name="NVIDIA H100", util=[90, 95, 100, 95], free=10 << 30, total=80 << 30),
]


def fake_read(nvml, env, torch_uuid=lambda r: None):
    return read_gpu(window_s=1.0, interval_s=0.25, nvml=nvml, env=env, torch_uuid=torch_uuid, sleep=lambda s: None)


def test_nvml_reading_averages_a_window_of_samples():
    nvml = FakeNVML(DEVICES)
    r = fake_read(nvml, {})
    assert r.available and r.uuid == "GPU-aaaa" and r.samples == 4
    assert r.util_mean == pytest.approx(0.25) and r.util_max == pytest.approx(0.40)
    assert r.mem_free_bytes == 70 << 30 and r.jpeg_util == pytest.approx(0.12)
    assert r.headroom(0.9) == pytest.approx(0.65)
    assert nvml.shutdown_called


@pytest.mark.parametrize(
    "env,uuid",
    [
        ({"CUDA_VISIBLE_DEVICES": "1"}, "GPU-bbbb"),
        ({"CUDA_VISIBLE_DEVICES": "1,0", "LOCAL_RANK": "1"}, "GPU-aaaa"),
        ({"CUDA_VISIBLE_DEVICES": "GPU-bbbb"}, "GPU-bbbb"),
        ({"LOCAL_RANK": "1"}, "GPU-bbbb"),
    ],
)
def test_the_trainers_gpu_is_found_honouring_cuda_visible_devices_and_local_rank(env, uuid):
    assert fake_read(FakeNVML(DEVICES), env).uuid == uuid


def test_torch_uuid_wins_over_index_order():
    r = fake_read(FakeNVML(DEVICES), {"CUDA_VISIBLE_DEVICES": "0"}, torch_uuid=lambda rank: "GPU-bbbb")
    assert r.uuid == "GPU-bbbb"


@pytest.mark.parametrize(
    "nvml,env,msg",
    [
        (FakeNVML(DEVICES, fail_init=FakeNVML.NVMLError("NVML Shared Library Not Found")), {}, "NVML is not usable"),
        (FakeNVML([]), {}, "NVML sees no GPU"),
        (FakeNVML(DEVICES), {"CUDA_VISIBLE_DEVICES": ""}, "CUDA_VISIBLE_DEVICES is empty"),
        (FakeNVML(DEVICES), {"CUDA_VISIBLE_DEVICES": "MIG-1234"}, "MIG instance"),
        (FakeNVML(DEVICES, mig=True), {}, "MIG is enabled"),
        (FakeNVML(DEVICES), {"CUDA_VISIBLE_DEVICES": "7"}, "not among NVML's 2 devices"),
    ],
)
def test_gpu_unavailable_cases_are_reported_plainly(nvml, env, msg):
    r = fake_read(nvml, env)
    assert not r.available and msg in r.reason and r.headroom(0.9) == 0


@pytest.mark.parametrize(
    "env,device,uuid",
    [
        ({"CUDA_VISIBLE_DEVICES": "GPU-bb"}, None, "GPU-bbbb"),  # a unique UUID prefix, as CUDA takes
        ({"CUDA_VISIBLE_DEVICES": "GPU-aaaa,GPU-bbbb"}, 1, "GPU-bbbb"),  # UUID entries, the loader's device 1
        ({"LOCAL_RANK": "0"}, "cuda:1", "GPU-bbbb"),  # the loader's device, not LOCAL_RANK
        ({"CUDA_VISIBLE_DEVICES": "1,0", "LOCAL_RANK": "0"}, "cuda:1", "GPU-aaaa"),
    ],
)
def test_the_loaders_device_is_read_through_uuids_prefixes_and_its_index(env, device, uuid):
    r = read_gpu(
        window_s=0.5,
        interval_s=0.25,
        device=device,
        nvml=FakeNVML(DEVICES),
        env=env,
        torch_uuid=lambda i: None,
        sleep=lambda s: None,
    )
    assert r.available and r.uuid == uuid


def test_an_ambiguous_uuid_prefix_is_reported_not_guessed():
    r = fake_read(FakeNVML(DEVICES), {"CUDA_VISIBLE_DEVICES": "GPU-"})
    assert not r.available and "matches 2 of NVML's GPUs" in r.reason


def test_torchs_bare_uuid_of_a_mig_instance_is_found_and_reported_as_mig():
    nvml = FakeNVML(DEVICES, mig_devices=["MIG-1234-5678"])
    r = fake_read(nvml, {}, torch_uuid=lambda i: "1234-5678")  # torch gives UUIDs without a prefix
    assert not r.available and "MIG instance MIG-1234-5678" in r.reason
    assert fake_read(FakeNVML(DEVICES), {}, torch_uuid=lambda i: "bbbb").uuid == "GPU-bbbb"


def test_decoder_utilization_is_labelled_nvdec_video_and_jpeg_as_nvjpg():
    r = fake_read(FakeNVML(DEVICES, decoder=40), {})
    assert r.nvdec_util == pytest.approx(0.40) and r.decoder_util == r.nvdec_util
    assert r.engine_utils() == {"NVDEC (video decode)": pytest.approx(0.40), "NVJPG (JPEG decode)": pytest.approx(0.12)}
    assert fake_read(FakeNVML(DEVICES), {}).engine_utils() == {"NVJPG (JPEG decode)": pytest.approx(0.12)}


def test_no_nvml_here_for_real():
    r = read_gpu(window_s=0.1, interval_s=0.1)
    assert isinstance(r, GpuUnavailable) and "NVML" in r.reason


# ---------------------------------------------------------------- online re-planning
def test_rebalance_moves_toward_the_faster_lane_and_respects_gpu_time():
    fast_gpu = LaneSample(images=640, busy_s=1.0, parallelism=1)  # 640 images/s
    slow_cpu = LaneSample(images=320, busy_s=2.0, parallelism=2)  # 320 images/s
    new = rebalance(0.5, fast_gpu, slow_cpu)
    assert 0.5 < new < 640 / 960 + 1e-9
    assert rebalance(0.5, fast_gpu, slow_cpu, gpu_util=0.99, max_gpu_util=0.8) < 0.5
    assert rebalance(0.5, LaneSample(0, 0, 1), LaneSample(5, 1, 1)) == 0.5  # too little evidence
    starved = rebalance(0.0, LaneSample(0, 0, 1), LaneSample(500, 1.0, 2))
    assert 0 < starved <= 0.1  # a starved GPU lane gets probed upward a little


class _FakeLane:
    def __init__(self, name, kind, parallelism):
        self.name, self.kind, self.parallelism = name, kind, parallelism


def test_the_online_planner_answers_new_caps_from_what_the_dispatcher_tells_it_and_converges():
    from hybridload.lanes._base import LaneKind
    from hybridload.planner._online import OnlinePlanner

    lanes = [_FakeLane("gpu", LaneKind.GPU, 1), _FakeLane("cpu", LaneKind.CPU_LOCAL, 2)]
    planner = OnlinePlanner(lanes, replan_every=4, max_gpu_util=0.9)
    caps, answers, seq = {LaneKind.GPU: 0.5}, [], 0
    for _ in range(12):  # each round: 4 batches of 16 images, 2 per lane, written back as the dispatcher does
        for lane, seconds in (("gpu", 0.025), ("cpu", 0.1), ("gpu", 0.025), ("cpu", 0.1)):  # 640 vs 320 images/s
            answer = planner.batch_done(seq, lane, 16, seconds, dict(caps))
            seq += 1
            if answer is not None:
                answers.append(seq)
                caps.update(answer)
    assert answers[0] == 4 and all(b - a >= 4 for a, b in zip(answers, answers[1:]))  # every replan_every batches
    # halfway each time, until a step would move it less than 0.01: within 0.02 of the GPU lane's share of capacity
    assert caps[LaneKind.GPU] == pytest.approx(640 / 960, abs=0.02)
    assert planner.history[0]["from"] == 0.5 and planner.history[0]["batch"] == 4
    assert planner.batch_done(seq, "gpu", 16, 0.025, dict(caps)) is None  # between re-plans: no answer


def test_a_checked_share_that_measured_clearly_better_overrides_the_model():
    from hybridload.cli._profile import trust_measurements

    m = Measurements(
        nodes=(NodeRate("local", 2, 240.0, True),),
        gpu_rate=500.0,
        gpu_available=True,
        gpu_cpu_cost=1.8,
        gpu_label="DALI CPU-only mode",
        gpu_time_bound=False,
    )
    plan = solve(m)
    assert plan.gpu_share > 0.5  # a noisy low CPU reading makes the model favour the GPU lane
    fixed = trust_measurements(plan, m, Limits(), [(0.0, 700.0), (plan.gpu_share, 610.0), (1.0, 480.0)])
    assert fixed.gpu_share == 0.0 and "the measurement wins" in fixed.reason
    kept = trust_measurements(plan, m, Limits(), [(0.0, 620.0), (plan.gpu_share, 610.0), (1.0, 480.0)])
    assert kept == plan  # within the margin: the model's choice stands


def test_workers_for_covers_the_predicted_cpu_rates_fastest_remote_nodes_first():
    from hybridload.planner._solver import workers_for

    m = Measurements(nodes=(NodeRate("local", 4, 100.0, True), NodeRate("slow", 8, 50.0), NodeRate("fast", 2, 200.0)))
    got = workers_for(m, {"cpu_local": 250.0, "cpu_remote": 500.0})
    assert got == {"local": 3, "fast": 2, "slow": 2}  # 3 x 100 >= 250; 2 x 200 + 2 x 50 = 500
    assert workers_for(m, {"cpu_local": 1000.0, "cpu_remote": 0.0}) == {"local": 4}  # capped at its cores


# ---------------------------------------------------------------- GPU lane rate
def test_gpu_lane_rate_synchronizes_before_each_clock_reading_and_does_not_count_spin_waits(monkeypatch):
    import time

    import numpy as np
    import torch

    import hybridload.lanes._gpu as gpu
    from hybridload.planner._rates import gpu_lane_rate

    events = []

    class SleepyLane:  # the host waits (sleep: no CPU); the "GPU" work is finished by synchronize
        device = torch.device("cuda", 0)

        def describe(self):
            return "fake GPU lane"

        def run_batch(self, task):
            events.append("batch")
            time.sleep(0.01)

            class R:
                indices = np.asarray(task.indices)

            return R()

        def close(self):
            pass

    def spin(device=None):  # a CUDA wait that spins a core
        events.append("sync")
        t0 = time.thread_time()
        while time.thread_time() - t0 < 0.01:
            pass

    monkeypatch.setattr(gpu, "build_engine", lambda *a, **kw: SleepyLane())
    monkeypatch.setattr(torch.cuda, "synchronize", spin)
    spec = LoaderPolicy().lane_spec(device="cuda:0")
    rate, cores, label = gpu_lane_rate(
        None, None, list(range(8)), 0.2, batch_size=4, device=torch.device("cuda", 0), spec=spec
    )
    assert label == "fake GPU lane" and rate > 0
    assert events[:2] == ["batch", "sync"] and events.count("sync") == events.count("batch")
    assert cores < 0.4  # the spinning waits (half the wall time) are not charged as CPU work


def test_a_busy_trainer_does_not_starve_the_gpu_lane_on_recorded_readings():
    """Recorded readings (no GPU here): NVML says 100 % busy, of which the trainer's kernels
    are 95 % and the GPU lane's own decode 5 %. Charging the whole overshoot to the lane (the
    old rule) shrinks the share every re-plan until it is gone; judged by the lane's own GPU
    time, the share holds. A lane whose own time is past the budget still backs off."""
    gpu, cpu = LaneSample(640, 1.0, 1), LaneSample(640, 2.0, 2)  # equal capacities: target 0.5
    share = old_rule = 0.5
    for _ in range(30):
        share = rebalance(share, gpu, cpu, gpu_util=1.0, lane_util=0.05, max_gpu_util=0.9)
        old_rule = rebalance(old_rule, gpu, cpu, gpu_util=1.0, max_gpu_util=0.9)
    assert share == pytest.approx(0.5)
    assert old_rule < 0.05  # what starved the lane
    hungry = rebalance(0.5, gpu, cpu, gpu_util=1.0, lane_util=0.4, max_gpu_util=0.9)
    assert hungry == pytest.approx(0.5 * 0.3 / 0.4)  # trainer 0.6: the lane may have 0.3
    past = rebalance(0.5, gpu, cpu, gpu_util=1.0, lane_util=0.2, max_gpu_util=0.9)
    assert past == pytest.approx(0.5 * 0.1 / 0.2)  # trainer 0.8: the 10 % slack
    assert rebalance(0.5, gpu, cpu, gpu_util=0.7, lane_util=0.3, max_gpu_util=0.9) == pytest.approx(0.5)


def test_the_online_planner_measures_the_lanes_own_gpu_time_per_wall_second():
    from hybridload.lanes._base import LaneKind
    from hybridload.planner._online import OnlinePlanner

    class Monitor:
        util = 1.0  # a trainer keeping the GPU busy all the time

        def stop(self):
            pass

    now = [0.0]
    lanes = [_FakeLane("gpu", LaneKind.GPU, 1), _FakeLane("cpu", LaneKind.CPU_LOCAL, 2)]
    planner = OnlinePlanner(lanes, replan_every=4, max_gpu_util=0.9, monitor=Monitor(), clock=lambda: now[0])
    caps, seq = {LaneKind.GPU: 0.5}, 0
    for _ in range(20):  # the GPU lane busy 0.05 s of each second: 5 % of the device
        for lane, seconds in (("gpu", 0.025), ("cpu", 0.1), ("gpu", 0.025), ("cpu", 0.1)):
            now[0] += 0.25
            answer = planner.batch_done(seq, lane, 16, seconds, dict(caps))
            seq += 1
            caps.update(answer or {})
    assert caps[LaneKind.GPU] > 0.5  # it moved toward the faster GPU lane instead of decaying


# readings recorded by `hybridload profile` on the 2-core CI machine (DALI's CPU-only stand-in): the
# CPU lane on 1 thread, the GPU lane batch by batch, then the loader checked at shares 0 and 1
RECORDED = Measurements(
    nodes=(NodeRate("local", 1, 600.0, True),),
    gpu_rate=600.0,
    gpu_available=True,
    gpu_cpu_cost=1.23,
    gpu_label="DALI CPU-only mode",
    gpu_time_bound=False,
)
RECORDED_POINTS = [(0.0, 600.0), (1.0, 926.0)]


def test_profile_prediction_measurement_and_bottleneck_agree_on_recorded_readings():
    """Before: "chosen GPU share 1.00", "predicted total 488", "measured at share 1.00: 926",
    "bottleneck: the CPUs". Now the checked points set the model's rates, and the plan is
    solved, explained and compared from that one model."""
    from hybridload.cli._profile import trust_measurements
    from hybridload.planner._calibrate import calibrate, predict_check

    lim = Limits()
    m = calibrate(RECORDED, RECORDED_POINTS)
    for share, measured in RECORDED_POINTS:
        assert predict_check(m, lim, share) == pytest.approx(measured)
    plan = trust_measurements(solve(m, lim), m, lim, RECORDED_POINTS)
    assert plan.gpu_share == 1.0
    assert plan.predicted["total"] == pytest.approx(926.0, rel=1e-3)
    assert "GPU lane's rate" in plan.bottleneck and "the CPUs" not in plan.bottleneck
    assert any("926 images/s in the loader" in n for n in plan.measurements["notes"])
    # the uncalibrated model's choice, overruled by the measurement: predicted and bottleneck move with it
    fixed = trust_measurements(solve(RECORDED, lim), RECORDED, lim, RECORDED_POINTS)
    assert fixed.gpu_share == 1.0 and "the measurement wins" in fixed.reason
    assert fixed.predicted["total"] == pytest.approx(predict(RECORDED, lim, 1.0)["total"], abs=0.01)
    assert "the CPUs" not in fixed.bottleneck


@pytest.mark.parametrize("name,lim", list(itertools.product(SETS, LIMITS)))
def test_the_bottleneck_names_the_bound_that_sets_the_predicted_total(name, lim):
    from hybridload.planner._solver import bounds, plan_at

    m = SETS[name]
    for share in (0.0, 0.3, 0.7, 1.0):
        plan = plan_at(m, lim, share)
        b = bounds(m, lim, plan.gpu_share)
        total = predict(m, lim, share)["total"]
        assert plan.predicted["total"] == pytest.approx(total, abs=0.01)
        tight = min(b.values())
        if b["cpu"] > tight * (1 + 1e-6):
            assert "the CPUs" not in plan.bottleneck
        if b["gpu"] <= tight * (1 + 1e-6) and math.isfinite(b["gpu"]):
            assert "GPU" in plan.bottleneck
        if lim.demand is not None and b["demand"] <= tight * (1 + 1e-6):
            assert "demand" in plan.bottleneck


def test_the_gpu_lanes_feeding_never_caps_the_gpu_lane_itself():
    """At share 1 no CPU lane runs: the cores feeding the GPU lane are already in its
    measured rate, so only that rate caps it (the old model capped it by the CPU lane's cores)."""
    pred = predict(STAND_IN, Limits(), 1.0)
    assert pred["total"] == pytest.approx(STAND_IN.gpu_rate)


def test_the_cpu_rate_probe_times_exactly_the_batch_job_the_cpu_lanes_run(photo_root, monkeypatch):
    """The planner rates the CPU lane by what it runs: the probe's batches are the in-process
    lane's, bit for bit and uint8, even for a recipe that normalizes and erases (delivery's work,
    the same for every lane, never a CPU lane's)."""
    import torch

    from hybridload import recipe as R, sources
    from hybridload.lanes import _cpu_job as cpu_job
    from hybridload.lanes._base import BatchTask
    from hybridload.lanes._local.inprocess import InProcessLane
    from hybridload.planner._rates import cpu_rate_per_core

    src = sources.ImageFolder(photo_root)
    rec = R.make([R.Decode(), R.RandomResizedCrop(32), R.ColorJitter(0.4), R.Normalize(), R.RandomErasing(p=1.0)])
    probed = []
    real = cpu_job.process_batch

    def recorded(*args, **kwargs):
        result = real(*args, **kwargs)
        probed.append(result)
        return result

    monkeypatch.setattr(cpu_job, "process_batch", recorded)
    assert cpu_rate_per_core(src, rec, range(4), seconds=0.01, batch=4, seed=5) > 0
    monkeypatch.undo()
    lane = InProcessLane(src, rec, threads=1)
    try:
        want = lane.run_batch(BatchTask(0, 0, np.arange(4), size=4, seed=5))
    finally:
        lane.close()
    assert probed and probed[0].indices.tolist() == [0, 1, 2, 3]
    assert probed[0].images.dtype == want.images.dtype == torch.uint8
    assert torch.equal(probed[0].images, want.images)
