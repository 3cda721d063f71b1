"""GPU checks of the runtime: they run wherever CUDA exists and are skipped elsewhere.

- exactness of every single-rank schedule on CUDA in float64 against the same model on the same GPU (NCCL world of 1);
- bf16 autocast close to float32;
- no host synchronisation per action: the number of synchronising CUDA calls in a step does not grow with N;
- CUDA-event timing: the measured timeline follows the schedule; the profiler times kernels, not their launches;
- the profiler leaves no activations allocated after it returns;
- with 2+ GPUs: Chimera, 1F1B and ZB-H1 over NCCL (per-pair channels) exact against the single-process reference;
- on one GPU: D = 2 and D = 4 pipeline ranks as threads of one process (`run_threads`, `ThreadComm` carrying CUDA tensors),
  every rank's runtime on cuda:0: Chimera, 1F1B, ZB-H1 and GPipe, float64 with dropout, SGD steps, exact against the same
  training in one process on the same GPU; bf16 autocast against the same reference under autocast; each rank's
  CUDA-event timeline and memory (`ranks_on_one_device`; `test_ranks_on_one_device_cpu` runs the same code on the CPU
  everywhere, so it is not skipped).
Run: .venv/bin/python -m pytest tests/test_gpu.py -q   (on a GPU node; `-s` prints the measurements)
"""
import contextlib, json, math, os, socket, subprocess, sys, textwrap
import pytest
import torch

cuda_only = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (runs on GPU nodes)")

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


@cuda_only
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


@cuda_only
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="NCCL needs one GPU per rank: 2+ GPUs")
@pytest.mark.timeout(900)
def test_nccl_pipelines_exact(tmp_path):
    world = 2 if torch.cuda.device_count() < 4 else 4
    for res in _run(MULTI, world, tmp_path):
        for k, v in res.items(): assert v < 1e-10, (k, v)


@cuda_only
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


@cuda_only
def test_runtime_memory_measured_on_the_gpu():
    "calibrate's runtime-memory probe: the CUDA context and libraries hold device memory outside the allocator; the allocator's slack is a fraction."
    from chimera_nb.calibrate import _runtime_memory
    dev = torch.device('cuda')
    xs = [torch.empty(int(n), device=dev) for n in (1e6, 3e6, 1e6)]; del xs[1]; ys = torch.empty(int(2e6), device=dev)   # a hole the allocator keeps
    outside, slack = _runtime_memory(dev)
    print(f"outside the allocator {outside / 2**20:.0f} MiB, slack {slack:.3f}")
    assert 50 * 2**20 < outside < torch.cuda.get_device_properties(dev).total_memory / 2 and 0 <= slack <= 1, (outside, slack)


@cuda_only
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


@cuda_only
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


@cuda_only
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


# ---- several pipeline ranks on one device: threads of this process (run_threads), one runtime per rank on the same device

# (schedule, N, options) per D; every rank's runtime on the one device
ONE_DEVICE_CONFIGS = {2: [('chimera', 4, {}), ('1f1b', 4, {}), ('zb-h1', 4, {}), ('gpipe', 2, {})],
                      4: [('chimera', 4, {}), ('1f1b', 8, {}), ('zb-h1', 8, {}), ('gpipe', 4, {})]}
MiB = 2 ** 20


def _microbatches(n, rows, width, dtype, g): return [torch.randn(rows, width, generator=g, dtype=dtype) for _ in range(n)]


def _rel(a, b) -> float:
    "Relative error of tensor `a` against `b` (0 where both are zero)."
    d, n = (a - b).norm().item(), b.norm().item()
    return d / n if n > 0 else d


def ranks_on_one_device(device, # 'cpu' or 'cuda:0': where every rank runs
                        D:int, name:str, N:int, opts:dict|None=None, # the schedule
                        dtype=torch.float64, width:int=32, rows:int=8, layers:int=2, # the model: mlp_stages, `rows` rows per micro-batch
                        dropout:float=0.1, steps:int=2, lr:float=0.1, seed:int=3,
                        autocast:bool=False, # bf16 autocast on CUDA (the runtime's and the reference's; a CPU ignores it, as the runtime does)
                        memory_model:bool=True, # profile the stages and ask memory.memory_estimate for each rank (SGD)
                        timeout:float=120.0) -> dict:
    """D pipeline ranks as threads of one process on one `device` (`run_threads`: `ThreadComm` carries the tensors, each
    rank's `PipelineRuntime` gets device=`device`), `steps` SGD steps of schedule `name`; then the same training in one
    process on the same device (`testing.reference_step`, the same dropout streams; under bf16 autocast too when
    `autocast`). Returns the worst relative errors (loss, gradients of every rank's stages at every step, final
    weights), the losses, each rank's timeline of the last step (CUDA events on a GPU, the host clock on a CPU) and
    each rank's memory: its weights and gradients (exact) and the peak bytes autograd kept for it (`probe_memory`:
    saved-tensor hooks, per rank), beside `memory_estimate`'s row for it and, on a GPU, the process' peak allocation
    over the threaded run (the ranks share one allocator: torch.cuda.max_memory_allocated cannot be split by rank)."""
    from torch import nn
    from chimera_nb.comm import run_threads
    from chimera_nb.runtime import PipelineRuntime
    from chimera_nb.schedules import make_schedule
    from chimera_nb.payload import split_microbatches
    from chimera_nb.testing import mlp_stages, reference_step
    dev = torch.device(device)
    cuda = dev.type == 'cuda'
    amp = (lambda: torch.autocast('cuda', dtype=torch.bfloat16)) if autocast and cuda else contextlib.nullcontext
    s = make_schedule(name, D, N, **(opts or {}))
    g = torch.Generator().manual_seed(0)
    data = [(_microbatches(N, rows, width, dtype, g), _microbatches(N, rows, width, dtype, g)) for _ in range(steps)]
    make = lambda: mlp_stages(s.num_stages, width, layers_per_stage=layers, dropout=dropout, dtype=dtype, seed=1)
    loss_fn = nn.functional.mse_loss

    def rank(r, world):
        rt = PipelineRuntime(s, make(), loss_fn, seed=seed, device=dev, autocast=autocast, probe_memory=True, timeout=timeout / 2)
        opt = torch.optim.SGD(list(rt.parameters()), lr=lr)
        losses, grads, saved = [], [], 0
        for xs, ys in data:
            losses.append(rt.step(xs, ys, optimizer=opt))   # SGD leaves the gradients it used in .grad
            grads.append({st: [p.grad.detach().cpu().clone() for p in m.parameters()] for st, m in rt.stages.items()})
            saved = max(saved, rt.stats['peak_saved_bytes'])
        wbytes = sum(p.numel() * p.element_size() for p in rt.parameters())
        return dict(losses=losses, grads=grads, params={st: [p.detach().cpu().clone() for p in m.parameters()] for st, m in rt.stages.items()},
                    timeline=rt.timeline, weight_bytes=wbytes, saved_bytes=saved, stages=sorted(rt.stages),
                    devices=sorted({str(p.device) for p in rt.parameters()}))

    if cuda:
        torch.cuda.synchronize(dev); base = torch.cuda.memory_allocated(dev); torch.cuda.reset_peak_memory_stats(dev)
    res = run_threads(rank, D, timeout=timeout)
    process_peak = torch.cuda.max_memory_allocated(dev) - base if cuda else None

    ref = [m.to(dev) for m in make()]
    ropt = torch.optim.SGD([p for m in ref for p in m.parameters()], lr=lr)
    out = dict(loss_err=0.0, grad_err=0.0, param_err=0.0, losses=[], ref_losses=[])
    for t, (xs, ys) in enumerate(data):
        for m in ref: m.zero_grad(set_to_none=True)
        with amp(): rloss = reference_step(ref, split_microbatches(xs, s), split_microbatches(ys, s), loss_fn, seed=seed, step=t, device=dev)
        losses = {r['losses'][t] for r in res}   # every rank returns the global batch's loss
        out['losses'].append(res[0]['losses'][t]); out['ref_losses'].append(rloss)
        out['loss_err'] = max([out['loss_err']] + [abs(l - rloss) / abs(rloss) for l in losses])
        for r in res:
            for st, gs in r['grads'][t].items():
                out['grad_err'] = max([out['grad_err']] + [_rel(a, b.grad.detach().cpu()) for a, b in zip(gs, ref[st].parameters())])
        ropt.step()
    for r in res:
        for st, ps in r['params'].items():
            out['param_err'] = max([out['param_err']] + [_rel(a, b.detach().cpu()) for a, b in zip(ps, ref[st].parameters())])

    tl = res[0]['timeline']   # the last step's, gathered over the pipeline: every rank's events
    ranks = []
    for r in range(D):
        ev = tl.rank_events(r)
        ranks.append(dict(rank=r, stages=res[r]['stages'], devices=res[r]['devices'], events=len(ev),
                          # an action may launch no kernel (ZB-H1's B on stage 0: no input takes a gradient): its two CUDA
                          # events are then back to back and may read the same time, so durations are >= 0, and counted
                          in_order=[e.action for e in ev] == s.actions(r), positive=all(e.end >= e.start for e in ev),
                          empty=sum(e.end == e.start for e in ev),
                          busy_ms=tl.busy(r) * 1e3, first_ms=min((e.start for e in ev), default=0) * 1e3,
                          last_ms=max((e.end for e in ev), default=0) * 1e3,
                          weights_grads=2 * res[r]['weight_bytes'], saved=res[r]['saved_bytes']))
    if memory_model:
        from chimera_nb.profile import profile_layers
        from chimera_nb.memory import memory_estimate
        prof_stages = [m.to(dev) for m in make()]
        x, y = data[0][0][0].to(dev), data[0][1][0].to(dev)
        prof = profile_layers(prof_stages, x, loss_fn, y, repeats=2, progress=False, autocast=autocast)
        for row, est in zip(ranks, memory_estimate(s, prof, optimizer='sgd', as_frame=False)):
            row.update(model_weights_grads=est['weights'] + est['grads'], model_activations=est['activations'], model_total=est['total'])
        del prof_stages
    out.update(schedule=s.name, D=D, N=N, device=str(dev), ranks=ranks, step_ms=tl.compute_makespan * 1e3, bubble=tl.bubble_ratio,
               process_peak=process_peak, clock='CUDA events' if cuda else 'host clock')
    return out


def _report(r) -> str:
    "One configuration's result as text: errors, losses, then one line per rank."
    lines = [f"{r['schedule']} D={r['D']} N={r['N']} on {r['device']}: loss err {r['loss_err']:.1e}, grad err {r['grad_err']:.1e}, "
             f"weights err {r['param_err']:.1e}; losses {[f'{l:.6f}' for l in r['losses']]} vs one process {[f'{l:.6f}' for l in r['ref_losses']]}; "
             f"last step {r['step_ms']:.2f} ms ({r['clock']}), bubble {r['bubble']:.2f}"
             + (f"; process peak over the threaded run {r['process_peak'] / MiB:.2f} MiB, sum of the ranks' modelled totals "
                f"{sum(x.get('model_total', 0) for x in r['ranks']) / MiB:.2f} MiB" if r['process_peak'] is not None else '')]
    for x in r['ranks']:
        lines.append(f"  rank {x['rank']} stages {x['stages']} on {x['devices']}: {x['events']} events ({x['empty']} of zero time), in order {x['in_order']}, "
                     f"busy {x['busy_ms']:.2f} ms from {x['first_ms']:.2f} to {x['last_ms']:.2f} ms; weights+grads "
                     f"{x['weights_grads'] / MiB:.3f} MiB (model {x.get('model_weights_grads', float('nan')) / MiB:.3f}), "
                     f"autograd's peak {x['saved'] / MiB:.3f} MiB (model {x.get('model_activations', float('nan')) / MiB:.3f})")
    return '\n'.join(lines)


def check_ranks_on_one_device(device, width, rows, exact_tol=1e-10, show=print) -> list:
    "Every ONE_DEVICE_CONFIGS run on `device` in float64 with dropout, and 1F1B / Chimera in bf16 autocast; asserts; returns the results."
    dev, results = torch.device(device), []
    for D, configs in ONE_DEVICE_CONFIGS.items():
        for name, N, opts in configs:
            r = ranks_on_one_device(device, D, name, N, opts, width=width, rows=rows)
            show(_report(r)); results.append(r)
            assert max(r['loss_err'], r['grad_err'], r['param_err']) < exact_tol, _report(r)
            for x in r['ranks']:
                assert x['devices'] == [str(dev)], x   # every rank's weights on the one device
                assert x['in_order'] and x['positive'] and x['events'] > 0, x
                assert x['weights_grads'] == x['model_weights_grads'], x
                # what autograd kept for the rank, counted by its hooks, against the model's order over the profiled stages
                assert abs(x['saved'] - x['model_activations']) <= 0.25 * x['model_activations'] + 4096, x
            if r['process_peak'] is not None: assert r['process_peak'] >= sum(x['weights_grads'] for x in r['ranks']), r['process_peak']
    for D, name, N in ((2, 'chimera', 4), (4, '1f1b', 8)):
        kw = dict(dtype=torch.float32, width=width, rows=rows)
        r = ranks_on_one_device(device, D, name, N, autocast=True, **kw)   # dropout on: the reference under the same autocast
        show(_report(r)); results.append(r)
        assert r['loss_err'] < 1e-3 and r['grad_err'] < 2e-2 and r['param_err'] < 1e-3, _report(r)
        # against float32 training: without dropout (a bf16 tensor's dropout mask need not be a float32 one's)
        bf, f32 = (ranks_on_one_device(device, D, name, N, autocast=a, dropout=0.0, memory_model=False, **kw) for a in (True, False))
        diff = max(abs(a - b) / abs(b) for a, b in zip(bf['losses'], f32['ref_losses']))
        show(f"bf16 autocast {name} D={D}: against one process under the same autocast (dropout 0.1): loss {r['loss_err']:.1e}, "
             f"grads {r['grad_err']:.1e}, weights {r['param_err']:.1e}; losses against float32 training (no dropout): {diff:.1e}")
        assert diff < 2e-2, diff
        assert max(f32['loss_err'], f32['grad_err'], f32['param_err']) < 1e-5, _report(f32)
    return results


@pytest.mark.timeout(120)
def test_ranks_on_one_device_cpu():
    "The one-GPU test's code, on the CPU: D = 2 and 4 ranks as threads, every schedule exact against one process (the GPU variant below)."
    check_ranks_on_one_device('cpu', width=16, rows=4)


@cuda_only
@pytest.mark.timeout(600)
def test_ranks_on_one_gpu():
    "D = 2 and D = 4 pipeline ranks sharing cuda:0 as threads: float64 exact, bf16 autocast, CUDA-event timelines, memory per rank."
    check_ranks_on_one_device('cuda:0', width=256, rows=32)


@cuda_only
@pytest.mark.timeout(600)
@pytest.mark.parametrize('compile', [None, 'default'])
def test_training_ranks_on_one_gpu(tmp_path, compile):
    "chimera-train's loop on two thread ranks sharing the GPU (eager, then compiled): it runs on the GPU, bf16, and reports MFU."
    from chimera_nb.spec import PipelineSpec, TrainConfig
    from chimera_nb.train import train_rank, prepare_data
    from chimera_nb.comm import run_threads
    # a text file of its own, not the Wikipedia slice: its reader needs gensim, which a GPU machine's image may lack
    words = 'the pipeline runs forward and backward passes of every micro batch on each stage of the model'.split()
    text = tmp_path / 'text.txt'
    text.write_text('\n'.join(' '.join(words[(i + j) % len(words)] for j in range(40)) for i in range(400)))
    cfg = TrainConfig(PipelineSpec(D=2, N=2, dtype='bfloat16', schedule='1f1b', compile=compile), steps=3, dropout=0.0, progress=False,
                      data=str(text), metrics=str(tmp_path / 'm.jsonl'))
    res = run_threads(train_rank, 2, cfg, prepare_data(cfg), timeout=500)[0]
    s = res.summary
    steps = [json.loads(l) for l in open(tmp_path / 'm.jsonl') if '"event"' not in l]
    print(f"compile={compile}: device {s['device']}, mean step {s['mean_step_s'] * 1e3:.1f} ms, first {s['first_step_s']:.1f} s, MFU {s['mfu']}")
    assert torch.cuda.get_device_name(0) in s['device'] and all(r['cuda_peak_bytes'][0] > 0 for r in steps)
    assert all(math.isfinite(l) for _, l in res.losses)


def _zero_exact(rank, world, device, models, refs, N=4, steps=3):
    "Chimera D = `world` on thread ranks sharing `device`, float64 with dropout, AdamW and clipping, optimizer state sharded (zero = 1), gathers overlapped."
    from chimera_nb.partition import Stage
    from chimera_nb.runtime import PipelineRuntime
    from chimera_nb.schedules import make_schedule
    from chimera_nb.testing import reference_step
    from chimera_nb.zero import ShardedOptimizer
    dev, s, model = torch.device(device), make_schedule('chimera', world, N), models[rank]
    b = model.partition.boundaries
    stages = {st: model.stages[st].double() for st in s.stages_of(rank)}
    rt = PipelineRuntime(s, stages, model.loss_fn, seed=11, device=dev)
    opt = ShardedOptimizer(rt, lambda ps: torch.optim.AdamW(ps, lr=1e-3, weight_decay=0.1), overlap=True, scatter=True)
    ref = [Stage(refs[rank].layers[x:y], x).double().to(dev) for x, y in zip(b, b[1:])]   # each rank's own reference
    rparams = [p for m in ref for p in m.parameters()]
    ropt, g, worst = torch.optim.AdamW(rparams, lr=1e-3, weight_decay=0.1), torch.Generator().manual_seed(2), 0.0
    for t in range(steps):
        ids = [torch.randint(0, 1024, (2, 6), generator=g) for _ in range(N)]
        xs, ys = [dict(input_ids=i, attention_mask=torch.ones_like(i)) for i in ids], [i.clone() for i in ids]
        loss = rt.step(xs, ys, optimizer=opt, max_norm=0.5)
        with rt.comm.compute_turn():   # the threads share the RNG: the reference's dropout draws take a turn as a rank's compute does
            ropt.zero_grad(); rloss = reference_step(ref, xs, ys, model.loss_fn, seed=11, step=t, device=dev)
        torch.nn.utils.clip_grad_norm_(rparams, 0.5); ropt.step()
        rt.grad_sync.settle(rt)   # the overlapped gathers: read the weights once they are in
        w = max((p - q).abs().max().item() for st, m in rt.stages.items() for p, q in zip(m.parameters(), ref[st].parameters()))
        worst = max(worst, abs(loss - rloss) / rloss, w)
    return worst, rt.grad_sync.scattered == set(rt.stages), sorted({str(p.device) for p in rt.parameters()})


def check_zero_on_threads(device):
    from chimera_nb.comm import run_threads
    from chimera_nb.models import build, to_stages
    mk = lambda: build('llama-tiny', seed=4, dropout=0.1, attn_implementation='eager')   # no tied copy: every stage reduce-scattered
    models = [to_stages(mk(), 2) for _ in range(2)]   # built here: transformers' lazy imports are not thread-safe; a copy per rank
    for worst, scattered, devices in run_threads(_zero_exact, 2, device, models, [mk() for _ in range(2)], timeout=300):
        print(f"zero = 1 on {device}, Chimera D = 2 thread ranks: worst error {worst:.1e}, reduce-scattered {scattered}, weights on {devices}")
        assert worst < 1e-10 and scattered and devices == [str(torch.device(device))], (worst, scattered, devices)


@pytest.mark.slow   # the default tier's form: nbs/06h_zero.ipynb on gloo processes
def test_sharded_optimizer_on_thread_ranks_cpu():
    "The GPU check's sharded-optimizer run, on the CPU: exact against one process."
    check_zero_on_threads('cpu')


@cuda_only
@pytest.mark.timeout(300)
def test_sharded_optimizer_on_thread_ranks_gpu():
    "zero = 1 on two thread ranks sharing the GPU: the reduce-scatter and all-gather on CUDA tensors, exact against one process."
    check_zero_on_threads('cuda:0')
