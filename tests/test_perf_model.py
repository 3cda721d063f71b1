"""Performance model against real processes: profiles saved and loaded, links measured, predictions of emulated
pipeline runs (real gloo processes, real messages) after calibrating on one of them, the autotuner's hand-off to training."""
import json, math, statistics, time
import pytest
import torch.distributed as dist
from hypothesis import given, settings, strategies as st
from tiers import examples   # the Hypothesis profile: fewer examples in make test, all in make test-all
from chimera_nb.autotune import autotune
from chimera_nb.schedules import make_schedule
from chimera_nb.launch import launch_local
from chimera_nb.profile import LayerProfile
from chimera_nb.perf_model import calibrate, predict
from chimera_nb.profile import Profile, estimate_profile
from chimera_nb.hardware import HARDWARE
from chimera_nb.runtime import PipelineRuntime
from chimera_nb.simulate import Costs
from chimera_nb.spec import TrainConfig


def test_profile_file_roundtrip_and_model_check(tmp_path):
    p = estimate_profile('gpt2-64', HARDWARE['b200'], 2)
    p.save(tmp_path / 'p.json')
    q = Profile.load(tmp_path / 'p.json', model='gpt2-64')
    assert q == p and q.device == 'b200' and q.versions['torch'] and q.date
    with pytest.raises(ValueError, match="this profile is of 'gpt2-64', not 'bert-48'"):
        Profile.load(tmp_path / 'p.json', model='bert-48')
    (tmp_path / 'bad.json').write_text('[1, 2')
    with pytest.raises(ValueError, match='not JSON'):
        Profile.load(tmp_path / 'bad.json')


_layer = st.fixed_dictionaries({k: st.one_of(st.integers(-5, 10**9), st.floats(allow_nan=True), st.text(max_size=3), st.none())
                                for k in LayerProfile._fields})

@settings(max_examples=examples(200), deadline=None)
@given(st.dictionaries(st.sampled_from(['model', 'micro_batch_size', 'seq_len', 'dtype', 'layers', 'p2p_latency', 'p2p_bandwidth',
                                        'ar_alpha', 'ar_beta', 'fixed', 'junk']),
                       st.one_of(st.integers(-3, 100), st.floats(allow_nan=True), st.text(max_size=5), st.none(),
                                 st.lists(_layer, max_size=2),
                                 st.lists(st.lists(st.one_of(st.floats(allow_nan=True), st.integers(-2, 5), st.text(max_size=2), st.none()),
                                                   max_size=3), max_size=2))))
def test_from_json_fuzz(d):
    "Any JSON object is a profile or a ValueError/TypeError, never another exception."
    try: p = Profile.from_json(json.dumps(d))
    except (ValueError, TypeError): return
    assert p.micro_batch_size >= 1 and p.layers


def _emulated(rank, world, plan):
    "Every schedule steps in turn (background load hits all alike); median step seconds and the last traced timeline."
    rts = [PipelineRuntime(make_schedule(name, world, N), None, emulate=costs, shapes=(4, 64), trace=trace)
           for name, N, costs, trace in plan]
    ts = [[] for _ in rts]
    for i in range(6):
        for k, rt in enumerate(rts):
            dist.barrier(); t = time.perf_counter(); rt.step(); dist.barrier()
            if i: ts[k].append(time.perf_counter() - t)
    return [(statistics.median(x), rt.timeline) for x, rt in zip(ts, rts)]


def test_calibrated_predictions_of_emulated_runs():
    "Four real processes run three schedules with emulated compute; calibrated on 1F1B, the others are predicted within 25%\n    (2 shared cores: bench/bench_perf_model.py measures the error properly)."
    f = [0.006, 0.008, 0.006, 0.007]
    costs = Costs(f, [2 * x for x in f])
    prof = Profile('emulated', 1, 0, 'float32', [LayerProfile(f's{i}', 0, 0, x, 2 * x, 0, 1024, 1024, 0) for i, x in enumerate(f)])
    plan = [('1f1b', 8, costs, True), ('gpipe', 8, costs, False), ('chimera', 8, costs, False)]
    res = launch_local(_emulated, 4, plan, timeout=300)[0]
    (m0, tl), rest = res[0], res[1:]
    cal = calibrate(prof, tl, make_schedule('1f1b', 4, 8), target=m0)
    assert all(abs(l.forward_s / x - 1) < 0.3 for l, x in zip(cal.layers, f))  # the sleeps, measured
    for (name, N, _, _), (m, _) in zip(plan[1:], rest):
        pred = predict(cal, make_schedule(name, 4, N), method='simulate', memory=False).iteration_s
        assert abs(pred / m - 1) < 0.25, (name, pred, m)


def test_autotuner_hands_a_runnable_train_config():
    tu = autotune(8, 64, model='bert-48', hardware=HARDWARE['b200'], micro_batch_sizes=[2, 4], schedules=['chimera', '1f1b'])
    cfg = TrainConfig(tu.best, steps=1)
    assert (cfg.spec.model, cfg.spec.dtype, cfg.spec.seq_len, cfg.spec.hardware) == ('bert-48', 'bfloat16', 128, 'b200')
    assert isinstance(cfg, TrainConfig) and cfg.world_size == 8 and cfg.global_batch_size == 64


@settings(max_examples=examples(100), deadline=None)
@given(name=st.sampled_from(['gpipe', '1f1b', 'chimera', 'interleaved-1f1b', 'zb-h1']), D=st.sampled_from([2, 4, 8]),
       dp=st.sampled_from([1, 2, 3, 4, 8]), g=st.sampled_from([1, 2, 8]), group=st.sampled_from([0, 1, 2, 4]),
       link=st.floats(0.5e9, 50e9), uplink=st.floats(1e9, 400e9), sync=st.sampled_from(['eager', 'end']),
       p2p=st.sampled_from([25e9, 2e9, math.inf]), zero=st.sampled_from([None, 1]))
def test_contention_never_makes_an_iteration_faster(name, D, dp, g, group, link, uplink, sync, p2p, zero):
    "Shared links (a node's, a group's uplinks) and sends that hold their sender only add time, on every schedule and layout; with nothing shared the prediction is the old one."
    import dataclasses
    free = dataclasses.replace(estimate_profile('bert-48', HARDWARE['l4'], 4), gpus_per_node=g, p2p_bandwidth=p2p)
    shared = dataclasses.replace(free, injection_bandwidth=link, group_nodes=group, uplink_bandwidth=uplink)
    s, kw = make_schedule(name, D, 2 * D), dict(sync=sync, memory=False, zero=zero)
    a, b = predict(free, s, dp, **kw), predict(shared, s, dp, **kw)
    assert math.isfinite(b.iteration_s) and b.iteration_s >= a.iteration_s, (a, b)
    assert math.isclose(b.breakdown.compute, a.breakdown.compute, rel_tol=1e-12)   # contention slows communication, not the layers
    off = dataclasses.replace(shared, injection_bandwidth=math.inf, uplink_bandwidth=math.inf)
    assert predict(off, s, dp, **kw).iteration_s == a.iteration_s
    held = predict(dataclasses.replace(free, blocking_send=True), s, dp, **kw)   # a send that holds its sender
    assert held.iteration_s >= a.iteration_s * (1 - 1e-12) and math.isclose(held.breakdown.compute, a.breakdown.compute, rel_tol=1e-12), (a, held)


def test_contention_on_stages_without_parameters():
    "A stage with nothing to all-reduce stays off the link (it divided by zero once)."
    import dataclasses
    p = dataclasses.replace(estimate_profile('bert-48', HARDWARE['l4'], 4), injection_bandwidth=1e9, p2p_bandwidth=5e9, ar_alpha=1e-5)
    p = dataclasses.replace(p, layers=[l._replace(params=0, param_bytes=0) for l in p.layers])
    assert math.isfinite(predict(p, make_schedule('chimera', 4, 8), 2, memory=False).iteration_s)
