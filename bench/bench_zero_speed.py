"""The step time of a sharded optimizer (issue 46, `zero = 1`) against the unsharded step, side by side in one run, at
D = 8 with emulated compute, and the performance model's prediction of both.

Every forward sleeps 20 ms and every backward 40 ms (the compute is emulated, so 8 processes fit on 2 cores), but the
gradients are real: each stage holds 2 M fp32 parameters (8 MB), and their sync is a real gloo collective over the
stage's replicas — an all-reduce without zero, a reduce-scatter before and an all-gather after the optimizer step with
zero (waited for at once, or with `overlap` before each stage's next compute, as the train loop runs it) — followed by a
real SGD step over them (SGD: the step then times the sync, not the optimizer's arithmetic).

The prediction is `perf_model.predict(profile, schedule, sync=..., zero=...)` on a profile of the same costs, whose
all-reduce, reduce-scatter and all-gather times are timed in the same run over the same groups (as `chimera-slurm
calibrate` times them).

Run: .venv/bin/python bench/bench_zero_speed.py   (about 3 minutes on 2 cores; prints a markdown table)
"""
import statistics, sys, time
import torch
from torch import nn
from chimera_nb.compute import EmulatedCompute
from chimera_nb.launch import launch_local
from chimera_nb.perf_model import predict
from chimera_nb.profile import LayerProfile, Profile
from chimera_nb.runtime import PipelineRuntime
from chimera_nb.schedules import make_schedule
from chimera_nb.simulate import Costs
from chimera_nb.zero import ShardedOptimizer

D, N, F, B, PARAMS, SHAPE, STEPS = 8, 8, 0.020, 0.040, 2_000_000, (8, 1024), 6
CASES = [('chimera', 'eager'), ('chimera', 'end')]
VARIANTS = (0, 'rs', 'rs+overlap', 'ar+overlap')   # zero 0; zero 1 reduce-scattered, gathers waited at once or overlapped; zero 1 all-reduced and sliced (scatter=False)


class EmulatedWithGradients(EmulatedCompute):
    "Sleeps for F and B as `EmulatedCompute` does; the gradient sync moves the stages' real flat gradient buffers."
    def __init__(self, *a, **kw): super().__init__(*a, **kw); self.flat = {}   # {stage: flat gradients}: a sharded optimizer pads them

    def reduce_buffer(self, stage):
        flat, ps = self.flat, list(self.ctx.stages[stage].parameters())
        if stage not in flat: flat[stage] = torch.zeros(sum(p.numel() for p in ps))   # zero: made padded by the optimizer
        i = 0
        for p in ps: p.grad = flat[stage][i:i + p.numel()].view_as(p); i += p.numel()
        return flat[stage], 'sum'

    def reduce_done(self, stage, buf): pass


def _timed_collectives(rt, repeats=5):
    "Median seconds of each collective over this rank's stages' groups, every group at once (as a step's syncs run), as the runtime's comm runs them."
    import torch.distributed as dist
    out, c = {}, rt.comm
    for kind in ('allreduce', 'reduce_scatter', 'all_gather'):
        ts = []
        for _ in range(repeats + 1):
            dist.barrier(); t = time.perf_counter()
            for st in sorted(rt.stages):
                g, ranks = rt.stage_groups[st]; x = torch.zeros(PARAMS); part = torch.zeros(PARAMS // len(ranks))
                c.wait({'allreduce': lambda: c.all_reduce(x, g), 'reduce_scatter': lambda: c.reduce_scatter(part, x, g),
                        'all_gather': lambda: c.all_gather(list(x.chunk(len(ranks))), part, g)}[kind](), 600)
            ts.append((time.perf_counter() - t) / len(rt.stages))
        out[kind] = statistics.median(ts[1:])
    return out


def _run(rank, world, schedule, sync, zero):
    torch.manual_seed(rank)
    s = make_schedule(schedule, D, N)
    stages = {st: nn.Linear(PARAMS // 1000, 1000, bias=False) for st in s.stages_of(rank)}
    rt = PipelineRuntime(s, stages, emulate=Costs(forward=F, backward=B), shapes=SHAPE, sync=sync,
                         compute=EmulatedWithGradients(Costs(forward=F, backward=B), s, SHAPE), trace=False)
    sgd = lambda ps: torch.optim.SGD(ps, lr=1e-3)
    opt = ShardedOptimizer(rt, sgd, overlap='overlap' in zero, scatter=zero.startswith('rs')) if zero else sgd(list(rt.parameters()))
    times = []
    for _ in range(STEPS):
        t0 = time.perf_counter(); rt.step(optimizer=opt); times.append(time.perf_counter() - t0)
    rt.grad_sync.settle(rt)   # the last step's overlapped gathers land before this rank moves on (or exits: its peers still send)
    timed = _timed_collectives(rt) if zero == 'rs' else None
    assert not zero or (rt.grad_sync.scattered == set(rt.stages)) == zero.startswith('rs'), zero
    return statistics.median(times[1:]), timed


def _profile(timed):
    "A profile of the emulated costs; the all-reduce as timed (Rabenseifner's beta over 2 ranks), the sharded shares as timed."
    layers = [LayerProfile(f'stage{i}', PARAMS, PARAMS * 4, F, B, 0, 4 * SHAPE[0] * SHAPE[1], 4 * SHAPE[0] * SHAPE[1]) for i in range(D)]
    links = {k: dict(seconds=[v]) for k, v in timed.items()}
    return Profile('emulated', 1, 0, 'float32', layers, ar_beta=timed['allreduce'] / (PARAMS * 4), machine=dict(links=links))


def main():
    rows, t = [], time.time()
    for schedule, sync in CASES:
        step = {z: launch_local(_run, D, schedule, sync, z, timeout=600) for z in VARIANTS}
        timed = {k: statistics.median(r[1][k] for r in step['rs']) for k in step['rs'][0][1]}
        step = {z: statistics.median(r[0] for r in res) for z, res in step.items()}
        prof, s = _profile(timed), make_schedule(schedule, D, N)
        pred = [predict(prof, s, sync=sync, zero=z, memory=False, cross_check=False).iteration_s for z in (None, 1)]
        rows.append((schedule, sync, step, *pred, timed))
    print(f"\n### zero = 1 against zero = 0: D = {D}, N = {N}, F = {F * 1e3:.0f} ms, B = {B * 1e3:.0f} ms (emulated), "
          f"{PARAMS / 1e6:.0f} M fp32 parameters a stage (real gloo collectives, SGD), median of steps 2-{STEPS}; "
          f"{D} processes on this machine ({time.time() - t:.0f} s)\n")
    print("| schedule | sync | zero 0 (s) | zero 1, RS (s) | x zero 0 | zero 1, RS, gathers overlapped (s) | x zero 0 | zero 1, AR + slice, "
          "overlapped (s) | x zero 0 | predicted zero 0 / zero 1 (s) | error zero 0 / zero 1, RS | timed AR / RS / AG (ms) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for sch, sync, m, p0, p1, timed in rows:
        x = lambda z: f"{m[z]:.3f} | {m[z] / m[0]:.3f}"
        print(f"| {sch} | {sync} | {m[0]:.3f} | {x('rs')} | {x('rs+overlap')} | {x('ar+overlap')} | {p0:.3f} / {p1:.3f} | "
              f"{p0 / m[0] - 1:+.1%} / {p1 / m['rs'] - 1:+.1%} | {timed['allreduce'] * 1e3:.1f} / {timed['reduce_scatter'] * 1e3:.1f} / {timed['all_gather'] * 1e3:.1f} |")
    return rows


if __name__ == '__main__':
    main()
