"""The optimizer state sharded over each stage's replicas (issue 46, `PipelineSpec.zero = 1`): each rank's model state
(weights, gradients, optimizer state) counted tensor by tensor in real runs, beside the memory model's, and the step time
with and without sharding, side by side in one run on this machine.

GPT-2 small (124 M) in fp32 with AdamW, sequence 32, B = 1, N = 4 on gloo processes: 1F1B and Chimera at D = 4 (W = 1, 4
processes) and W = 2 (8 processes), with zero = 0 and 1. Each rank's bytes after three steps; the memory model is
`memory.memory_estimate` (its weights, gradients and optimizer parts) on the same stages; the step is the median of steps 2-3.

Run: .venv/bin/python bench/bench_zero.py   (about 4 minutes on 2 cores; prints a markdown table)
"""
import json, statistics, sys, time
import torch

MODEL, D, N, B, L = 'gpt2-small', 4, 4, 1, 32


def _state(rank, world, schedule, W, zero, steps=3):
    from chimera_nb.memory import memory_estimate
    from chimera_nb.models import build, to_stages
    from chimera_nb.profile import LayerProfile
    from chimera_nb.runtime import PipelineRuntime
    from chimera_nb.schedules import make_schedule
    from chimera_nb.zero import ShardedOptimizer
    torch.manual_seed(0)
    s = make_schedule(schedule, D, N)
    m = build(MODEL, device='meta'); pm = to_stages(m, s.num_stages)
    from chimera_nb.models import materialize
    b = pm.partition.boundaries
    materialize(m, [i for st in s.stages_of(rank % D) for i in range(b[st], b[st + 1])])
    rt = PipelineRuntime(s, {st: pm.stages[st] for st in s.stages_of(rank % D)}, pm.loss_fn, dp_width=W, ties=pm.ties)
    adamw = lambda ps: torch.optim.AdamW(ps, lr=1e-4)
    opt = ShardedOptimizer(rt, adamw) if zero else adamw(list(rt.parameters()))
    times = []
    for t in range(steps):
        ids = torch.randint(0, 50257, (B * N, L), generator=torch.Generator().manual_seed(t * 100 + rank // D))
        xs = [dict(input_ids=ids[i:i + B]) for i in range(0, B * N, B)]
        t0 = time.perf_counter(); rt.step(xs, [x['input_ids'] for x in xs], optimizer=opt, max_norm=1.0); times.append(time.perf_counter() - t0)
    nbytes = lambda ts: sum(x.numel() * x.element_size() for x in ts)
    params = list(rt.parameters())
    inner = getattr(opt, 'inner', opt)
    got = dict(weights=nbytes(params), grads=nbytes([p.grad for p in params if p.grad is not None]),
               optimizer=nbytes([v for st in inner.state.values() for v in st.values() if torch.is_tensor(v) and v.dim()]))
    sp = [LayerProfile('stage', sum(p.numel() for p in st_.parameters()), 4 * sum(p.numel() for p in st_.parameters()), 1, 1, 0, 0, 0) for st_ in pm.stages]
    model = memory_estimate(s, sp, 'adamw', as_frame=False, zero=zero, dp_width=W)[rank % D]
    return dict(rank=rank, got=got, model={k: model[k] for k in got}, step_s=statistics.median(times[1:]))


def main():
    from chimera_nb.launch import launch_local
    rows = []
    for schedule, W in (('1f1b', 1), ('chimera', 1), ('1f1b', 2), ('chimera', 2)):
        for zero in (None, 1):
            t0 = time.perf_counter()
            res = launch_local(_state, D * W, schedule, W, zero, timeout=900)
            worst = max(res, key=lambda r: sum(r['got'].values()))
            err = max(abs(r['got'][k] / r['model'][k] - 1) for r in res for k in r['got'] if r['model'][k])
            rows.append(dict(schedule=schedule, W=W, zero=zero or 0, weights_GB=worst['got']['weights'] / 1e9, grads_GB=worst['got']['grads'] / 1e9,
                             optimizer_GB=worst['got']['optimizer'] / 1e9, state_GB=sum(worst['got'].values()) / 1e9,
                             model_error=err, step_s=statistics.median(r['step_s'] for r in res), wall_s=time.perf_counter() - t0))
            print(json.dumps(rows[-1]), flush=True)
    base = {r['W']: r['state_GB'] for r in rows if r['schedule'] == '1f1b' and not r['zero']}
    step0 = {(r['schedule'], r['W']): r['step_s'] for r in rows if not r['zero']}
    print('\n| schedule | W | zero | weights (GB) | grads (GB) | optimizer (GB) | model state (GB) | x 1F1B without zero | memory model, worst error | step (s) | x without zero |')
    print('|---|---|---|---|---|---|---|---|---|---|---|')
    for r in rows:
        print(f"| {r['schedule']} | {r['W']} | {r['zero']} | {r['weights_GB']:.3f} | {r['grads_GB']:.3f} | {r['optimizer_GB']:.3f} | {r['state_GB']:.3f} | "
              f"{r['state_GB'] / base[r['W']]:.2f} | {r['model_error']:.1%} | {r['step_s']:.3f} | {r['step_s'] / step0[(r['schedule'], r['W'])]:.2f} |")


if __name__ == '__main__': main()
