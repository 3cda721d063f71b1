"""GPU checks of the runtime: they run wherever CUDA exists and are skipped elsewhere.

- exactness of every single-rank schedule on CUDA in float64 against the same model on the same GPU (NCCL world of 1);
- bf16 autocast close to float32;
- no host synchronisation per action: the number of synchronising CUDA calls in a step does not grow with N;
- CUDA-event timing: the measured timeline follows the schedule; the profiler times kernels, not their launches;
- the profiler leaves no activations allocated after it returns;
- with 2+ GPUs: Chimera, 1F1B and ZB-H1 over NCCL (per-pair channels) exact against the single-process reference.
Run: .venv/bin/python -m pytest tests/test_gpu.py -q   (on a GPU node; `-s` prints the measurements)
"""
import json, os, socket, subprocess, sys, textwrap
import pytest
import torch

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (runs on GPU nodes)")

COMMON = textwrap.dedent('''
    import json, math, sys, time, warnings
    import torch
    from torch import nn
    from chimera_nb.launch import init_from_env
    from chimera_nb.runtime import PipelineRuntime
    from chimera_nb.schedules import make_schedule
    from chimera_nb.testing import mlp_stages, reference_step
    rank, world, local = init_from_env('nccl')
    dev = torch.device(f'cuda:{local}')
    out = {}
''')

SINGLE = COMMON + textwrap.dedent('''
    # 1. exactness, float64, dropout, 3 steps with SGD, every single-rank schedule
    for name, N, opts in [('gpipe', 4, {}), ('1f1b', 8, {}), ('zb-h1', 8, {}), ('dualpipev', 4, {}),
                          ('interleaved-1f1b', 4, dict(chunks=3))]:
        s = make_schedule(name, 1, N, **opts)
        stages = mlp_stages(s.num_stages, 64, dropout=0.1, dtype=torch.float64, seed=1)
        ref = [m.to(dev) for m in mlp_stages(s.num_stages, 64, dropout=0.1, dtype=torch.float64, seed=1)]
        rt = PipelineRuntime(s, stages, nn.functional.mse_loss, seed=3, autocast=False)
        g = torch.Generator().manual_seed(0)
        err = 0.0
        for t in range(3):
            xs = [torch.randn(8, 64, generator=g, dtype=torch.float64) for _ in range(N)]
            loss = rt.step(xs, xs)
            for m in ref: m.zero_grad()
            rloss = reference_step(ref, xs, xs, nn.functional.mse_loss, seed=3, step=t, device=dev)
            err = max(err, abs(loss - rloss) / abs(rloss))
            for a, b in zip(rt.parameters(), [p for m in ref for p in m.parameters()]):
                err = max(err, ((a.grad - b.grad).norm() / b.grad.norm()).item())
            with torch.no_grad():
                for a, b in zip(rt.parameters(), [p for m in ref for p in m.parameters()]): a -= 0.1 * a.grad; b -= 0.1 * b.grad
        out[f'exact {name}'] = err
    # 2. bf16 autocast against float32
    s = make_schedule('1f1b', 1, 8)
    xs = [torch.randn(16, 256, generator=torch.Generator().manual_seed(i)) for i in range(8)]
    losses = {}
    for ac in (False, True):
        rt = PipelineRuntime(s, mlp_stages(1, 256, layers_per_stage=4, seed=2), nn.functional.mse_loss, autocast=ac)
        losses[ac] = rt.step(xs, xs)
    out['bf16 rel diff'] = abs(losses[True] - losses[False]) / abs(losses[False])
    # 3. host synchronisations per step do not grow with the number of actions
    syncs = {}
    for N in (4, 32):
        s = make_schedule('1f1b', 1, N)
        rt = PipelineRuntime(s, mlp_stages(1, 256, layers_per_stage=2, seed=2), nn.functional.mse_loss, trace=False)
        xs = [torch.randn(16, 256) for _ in range(N)]
        rt.step(xs, xs)  # warm-up
        torch.cuda.synchronize()
        torch.cuda.set_sync_debug_mode('warn')
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter('always')
            rt.step(xs, xs)
        torch.cuda.set_sync_debug_mode('default')
        syncs[N] = sum('synchroniz' in str(x.message) for x in w)
    out['syncs per step'] = syncs
    # 4. CUDA-event timing: every action, in the schedule's order, with positive durations
    s = make_schedule('zb-h1', 1, 8)
    rt = PipelineRuntime(s, mlp_stages(1, 512, layers_per_stage=4, seed=2), nn.functional.mse_loss)
    xs = [torch.randn(64, 512) for _ in range(8)]
    for _ in range(3): rt.step(xs, xs)
    ev = rt.timeline.rank_events(0)
    out['timeline in order'] = [e.action for e in ev] == s.actions(0)
    out['durations positive'] = all(e.end > e.start for e in ev)
    out['step ms'] = rt.timeline.compute_makespan * 1e3
    out['device'] = torch.cuda.get_device_name(dev)
    print('RESULT ' + json.dumps(out))
''')

MULTI = COMMON + textwrap.dedent('''
    from chimera_nb.testing import check_against_reference
    for name, N, opts in [('chimera', 4, {}), ('1f1b', 4, {}), ('zb-h1', 4, {}), ('chimera', 4, dict(concat='halving'))]:
        r = check_against_reference(rank, world, name, N, steps=2, dropout=0.0, runtime_kw=dict(autocast=False), **opts)
        out[name + str(opts)] = max(r['loss_err'], r['grad_err'])
    print('RESULT ' + json.dumps(out))
''')


def _port():
    with socket.socket() as sk:
        sk.bind(('127.0.0.1', 0)); return sk.getsockname()[1]


def _run(script, world, tmp_path, timeout=600):
    path = tmp_path / 'gpu_script.py'; path.write_text(script)
    port, procs = str(_port()), []
    for r in range(world):
        env = dict(os.environ, RANK=str(r), WORLD_SIZE=str(world), LOCAL_RANK=str(r), MASTER_ADDR='127.0.0.1', MASTER_PORT=port)
        procs.append(subprocess.Popen([sys.executable, str(path)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    outs = [p.communicate(timeout=timeout) for p in procs]
    for p, (o, e) in zip(procs, outs): assert p.returncode == 0, e[-4000:]
    return [json.loads(l[7:]) for o, _ in outs for l in o.splitlines() if l.startswith('RESULT ')]


@pytest.mark.timeout(900)
def test_single_gpu(tmp_path):
    res = _run(SINGLE, 1, tmp_path)[0]
    print(res)
    for k, v in res.items():
        if k.startswith('exact'): assert v < 1e-10, (k, v)
    assert res['bf16 rel diff'] < 2e-2, res
    s4, s32 = res['syncs per step']['4'], res['syncs per step']['32']
    assert s4 == s32 and s32 <= 4, f"synchronising calls per step: N=4 {s4}, N=32 {s32} (must not grow with the actions)"
    assert res['timeline in order'] and res['durations positive']


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="NCCL needs one GPU per rank: 2+ GPUs")
@pytest.mark.timeout(900)
def test_nccl_pipelines_exact(tmp_path):
    world = 2 if torch.cuda.device_count() < 4 else 4
    for res in _run(MULTI, world, tmp_path):
        for k, v in res.items(): assert v < 1e-10, (k, v)


def test_profiled_cuda_times_are_the_kernels_not_their_launches():
    "profile_layers waits for the GPU: a layer's profiled forward is the same forward timed by CUDA events, not its launch."
    from torch import nn
    from chimera_nb.profile import profile_layers
    dev = torch.device('cuda')
    layer = nn.Sequential(*[nn.Linear(4096, 4096) for _ in range(4)]).to(dev)
    x = torch.randn(2048, 4096, device=dev)
    prof = profile_layers([layer], x, repeats=5, progress=False)[0]
    start, end, ts = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True), []
    for _ in range(5):
        start.record(); layer(x); end.record(); torch.cuda.synchronize(); ts.append(start.elapsed_time(end) / 1e3)
    ref = sorted(ts)[2]
    print(f"profiled forward {prof.forward_s * 1e3:.2f} ms, CUDA events {ref * 1e3:.2f} ms")
    assert 0.7 * ref <= prof.forward_s <= 2.0 * ref, (prof.forward_s, ref)
    assert prof.backward_s > prof.forward_s   # two matmuls per layer backward, one forward


def test_profile_under_autocast_is_what_a_bf16_run_computes_and_keeps():
    "profile_layers(autocast=True) times and stashes what the runtime's bf16 actions do: a Linear keeps its input in bf16, and runs faster."
    from torch import nn
    from chimera_nb.profile import profile_layers
    dev = torch.device('cuda')
    lin, x = nn.Linear(256, 256).to(dev), torch.randn(8, 256, device=dev)
    fp32, amp = (profile_layers([lin], x, repeats=3, progress=False, autocast=a)[0] for a in (False, True))
    assert fp32.saved_bytes == 8 * 256 * 4, fp32
    assert amp.saved_bytes == 8 * 256 * 2, amp   # its input, stashed in bf16 (measured on an H200, 2026-11-26)
    big = nn.Sequential(*[nn.Linear(4096, 4096) for _ in range(4)]).to(dev)
    xb = torch.randn(2048, 4096, device=dev)
    t32, t16 = (profile_layers([big], xb, repeats=5, progress=False, autocast=a)[0].forward_s for a in (False, True))
    print(f"forward fp32 {t32 * 1e3:.2f} ms, bf16 autocast {t16 * 1e3:.2f} ms")
    assert t16 < t32, (t16, t32)


def test_profiled_launch_bound_layer_takes_its_launch_time():
    "A layer of many tiny kernels is bound by its launches: profiled, it takes what it takes per call repeated back to back (as in a run), not that plus a wait for the device."
    import time
    from torch import nn
    from chimera_nb.profile import profile_layers

    class Tiny(nn.Module):
        def __init__(self): super().__init__(); self.w = nn.Parameter(torch.ones(16))
        def forward(self, x):
            for _ in range(200): x = x * self.w + 1e-3
            return x
    layer, x = Tiny().cuda(), torch.randn(16, device='cuda')
    prof = profile_layers([layer], x, repeats=7, progress=False)[0]
    for _ in range(3): layer(x)
    torch.cuda.synchronize(); t = time.perf_counter()
    for _ in range(20): layer(x)
    torch.cuda.synchronize(); ref = (time.perf_counter() - t) / 20
    print(f"launch-bound layer: profiled {prof.forward_s * 1e3:.2f} ms, back to back {ref * 1e3:.2f} ms per call")
    assert 0.5 * ref <= prof.forward_s <= 1.5 * ref, (prof.forward_s, ref)


def test_profiling_leaves_no_gpu_memory_behind():
    "The profiler once kept every layer's activations allocated after it returned (its counting hook made a cycle through the graph: 4.9 GB at B = 64 on an H100, 2026-11-26)."
    from torch import nn
    from chimera_nb.profile import profile_layers
    dev = torch.device('cuda')
    layers = [nn.Sequential(nn.Linear(1024, 1024), nn.Tanh()).to(dev) for _ in range(4)]   # tanh saves its own output
    x = torch.randn(4096, 1024, device=dev)
    torch.cuda.synchronize(); before = torch.cuda.memory_allocated(dev)
    prof = profile_layers(layers, x, repeats=2, progress=False, autocast=True)
    torch.cuda.synchronize(); left = torch.cuda.memory_allocated(dev) - before
    print(f"profiled {sum(p.saved_bytes for p in prof) / 2**20:.0f} MiB of activations; {left / 2**20:.1f} MiB left allocated after")
    assert left < 0.05 * sum(p.saved_bytes for p in prof), left
