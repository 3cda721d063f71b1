"""Runtime benchmarks (CPU, gloo, processes forked by launch_local).

1. Orchestration overhead (emulated compute): every F and B sleeps 20 ms, activations (real tensors) and gradients
   travel through real gloo point-to-point. Measured makespan / simulated makespan (targets <= 1.03 at D=8, N=16 and
   <= 1.05 at D=16, N=32) for Chimera and 1F1B, and the measured Chimera / 1F1B speed-up beside the simulated one.
2. Against the peer (real compute, 2 ranks, one intra-op thread each): our 1F1B vs
   torch.distributed.pipelining.Schedule1F1B (PipelineStage on gloo) on the same model and global batch
   (target: ours <= 0.85x the peer's step time), and our Chimera D=2 beside both.

3. Paper scale (emulated): Chimera and 1F1B at D=32, N=32, 20 ms ops: 32 processes on a laptop.

Run: .venv/bin/python bench/bench_runtime.py            (all parts; prints markdown tables; ~1.5 min on 2 cores)
     .venv/bin/python bench/bench_runtime.py emulated   (part 1 only)  |  ... peer  (part 2)  |  ... paper  (part 3)
"""
import statistics, sys, time
import torch
import torch.distributed as dist
from torch import nn
from chimera_nb.schedules import make_schedule
from chimera_nb.simulate import Costs, simulate
from chimera_nb.runtime import PipelineRuntime
from chimera_nb.launch import launch_local
from chimera_nb.testing import mlp_stages


# ---------------------------------------------------------------- 1. emulated compute
def _emulated(rank, world, schedules, costs, shape, steps, rt_kw):
    out = {}
    for key, s in schedules:
        rt = PipelineRuntime(s, None, emulate=costs, shapes=shape, **rt_kw)
        spans = []
        for _ in range(steps):
            rt.step()
            spans.append(rt.timeline.compute_makespan)
        out[key] = (spans, rt.timeline) if rank == 0 else None
    return out


def bench_emulated(D=8, N=16, op=0.020, shape=(8, 1024), steps=5, **rt_kw):
    costs = Costs(forward=op, backward=op)
    schedules = [('chimera', make_schedule('chimera', D, N)), ('1f1b', make_schedule('1f1b', D, N))]
    t = time.time()
    res = launch_local(_emulated, D, schedules, costs, shape, steps, rt_kw, timeout=600)[0]
    rows = {}
    for key, s in schedules:
        spans, tl = res[key]
        sim = simulate(s, costs).compute_makespan
        meas = statistics.median(spans[1:])  # first step warms up the connections
        rows[key] = (meas, sim)
    print(f"\n### Orchestration overhead: emulated compute, D={D}, N={N}, F = B = {op * 1e3:.0f} ms, {rt_kw or ''} "
          f"messages {shape} float32, {steps} steps (median of steps 2..{steps}); {D} processes on this machine\n")
    print("| schedule | measured makespan (s) | simulated makespan (s) | measured / simulated |")
    print("|---|---|---|---|")
    for key, (m, s_) in rows.items(): print(f"| {key} | {m:.4f} | {s_:.4f} | {m / s_:.4f} |")
    sp_m = rows['1f1b'][0] / rows['chimera'][0]
    sp_s = rows['1f1b'][1] / rows['chimera'][1]
    print(f"\nChimera speed-up over 1F1B: measured {sp_m:.3f}x, simulated {sp_s:.3f}x   (launch + run {time.time() - t:.1f} s)")
    return rows


# ---------------------------------------------------------------- 2. real compute against torch.distributed.pipelining
def _peer(rank, world, width, layers, mb_size, N, steps, warmup):
    torch.manual_seed(0)
    D = world
    stages = mlp_stages(D, width, layers_per_stage=layers, dropout=0.0, seed=0)
    g = torch.Generator().manual_seed(1)
    xs = [torch.randn(mb_size, width, generator=g) for _ in range(N)]
    ys = [torch.randn(mb_size, width, generator=g) for _ in range(N)]
    X, Y = torch.cat(xs), torch.cat(ys)
    loss_fn = nn.functional.mse_loss
    times = {}

    steppers = {}

    # torch.distributed.pipelining: PipelineStage + Schedule1F1B (it splits the batch into N micro-batches)
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B
    mod = mlp_stages(D, width, layers_per_stage=layers, dropout=0.0, seed=0)[rank]
    stage = PipelineStage(mod, rank, D, torch.device('cpu'))
    sched = Schedule1F1B(stage, N, loss_fn=loss_fn)
    def torch_step():
        mod.zero_grad(set_to_none=True)
        if rank == 0: sched.step(X)
        elif rank == D - 1: sched.step(target=Y, losses=[])
        else: sched.step()
    steppers['torch.distributed.pipelining Schedule1F1B'] = torch_step
    rts = {}
    for key, s, kw in (('chimera_nb 1f1b', make_schedule('1f1b', D, N), {}),
                       ('chimera_nb chimera', make_schedule('chimera', D, N), {})):
        rt = rts[key] = PipelineRuntime(s, mlp_stages(D, width, layers_per_stage=layers, dropout=0.0, seed=0), loss_fn,
                                        trace=False, **kw)
        steppers[key] = (lambda rt: lambda: rt.step(xs, ys))(rt)
    # round-robin, one step of each at a time, so that background load hits all of them alike
    samples = {k: [] for k in steppers}
    for i in range(warmup + steps):
        for k, fn in steppers.items():
            dist.barrier()
            t = time.perf_counter(); fn(); dist.barrier()
            if i >= warmup: samples[k].append(time.perf_counter() - t)
    times = {k: statistics.median(v) for k, v in samples.items()}
    for key, rt in rts.items():  # the all-reduce tail: median over 7 traced steps (one step is too noisy on a loaded machine)
        rt.trace, tails = True, []
        for _ in range(7):
            rt.step(xs, ys)
            tl = rt.timeline
            ar = [e for e in tl.events if e.kind == 'AR']
            tails.append(max([e.end for e in ar], default=tl.compute_makespan) - tl.compute_makespan)
        times[key + ' AR tail'] = statistics.median(tails)
    return times


def bench_peer(width=512, layers=4, mb_size=32, N=8, steps=21, warmup=3):
    t = time.time()
    res = launch_local(_peer, 2, width, layers, mb_size, N, steps, warmup, threads=1, timeout=600)
    times = {k: max(r[k] for r in res) for k in res[0]}
    base = times['torch.distributed.pipelining Schedule1F1B']
    print(f"\n### Real compute, D=2 ranks x 1 thread: MLP {2 * layers} x Linear({width},{width})+GELU, "
          f"N={N} micro-batches of {mb_size}, float32, median of {steps} steps after {warmup} warm-up, the three runtimes stepping in turn\n")
    print("| runtime | step time (ms) | / torch Schedule1F1B |")
    print("|---|---|---|")
    for k, v in times.items():
        if not k.endswith('AR tail'): print(f"| {k} | {v * 1e3:.1f} | {v / base:.3f} |")
    tail, step = times['chimera_nb chimera AR tail'], times['chimera_nb chimera']
    print(f"\nChimera: gradient all-reduce of the 2 replicated stages ends {tail * 1e3:.1f} ms after the last compute "
          f"({tail / step:.1%} of its step; median of 7 traced steps; 1F1B has no replicas: {times['chimera_nb 1f1b AR tail'] * 1e3:.1f} ms)")
    print(f"\n(launch + run {time.time() - t:.1f} s)")
    return times


if __name__ == '__main__':
    parts = sys.argv[1:] or ['emulated', 'peer', 'paper']
    if 'emulated' in parts:
        bench_emulated()
        bench_emulated(D=16, N=32)
    if 'paper' in parts: bench_emulated(D=32, N=32, steps=3)  # paper-scale replay: 32 processes on this machine
    if 'peer' in parts:
        bench_peer()
        bench_peer(N=32)  # more micro-batches per step: Chimera's all-reduce is amortised, its smaller bubble shows
