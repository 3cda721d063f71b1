"""GPU benchmark (needs CUDA): the runtime's per-step overhead on one GPU, side by side with plain training.

Same model (an MLP of 8 x Linear(2048, 2048) + GELU in 2 stages, bf16 autocast), same global batch (N micro-batches
of 32 rows), on one GPU: plain training (a loop over micro-batches, forward + backward each) against our
PipelineRuntime running 1F1B and ZB-H1 with D = 1 (the model as one stage) and interleaved 1F1B with 2 chunks (two
stages on the GPU, handed over locally): what the executor,
the instruction loop and the tracing cost on top of the same kernels. Also: host synchronisations per step.

Run (on a GPU node):  python bench/bench_gpu.py     (a world of one NCCL process; prints a markdown table)
"""
import os, socket, statistics, time
import torch
from torch import nn


def _mlp(width=2048, layers=8, seed=0):
    torch.manual_seed(seed)
    blocks = [nn.Sequential(nn.Linear(width, width), nn.GELU()) for _ in range(layers)]
    return [nn.Sequential(*blocks[:layers // 2]), nn.Sequential(*blocks[layers // 2:])]


def _timed(fn, steps=20, warmup=5):
    for _ in range(warmup): fn()
    torch.cuda.synchronize()
    out = []
    for _ in range(steps):
        t = time.perf_counter(); fn(); torch.cuda.synchronize(); out.append(time.perf_counter() - t)
    return statistics.median(out)


def main(N=16, rows=512, width=2048, rounds=5):
    from chimera_nb.launch import init_from_env
    from chimera_nb.runtime import PipelineRuntime
    from chimera_nb.schedules import make_schedule
    os.environ.setdefault('RANK', '0'); os.environ.setdefault('WORLD_SIZE', '1'); os.environ.setdefault('MASTER_ADDR', '127.0.0.1')
    with socket.socket() as sk:
        sk.bind(('127.0.0.1', 0)); os.environ.setdefault('MASTER_PORT', str(sk.getsockname()[1]))
    init_from_env('nccl')
    dev = torch.device('cuda:0')
    xs = [torch.randn(rows, width, device=dev) for _ in range(N)]
    stages = [m.to(dev) for m in _mlp(width)]
    opt = torch.optim.SGD([p for m in stages for p in m.parameters()], lr=1e-4)

    def plain():
        opt.zero_grad(set_to_none=True)
        for x in xs:
            with torch.autocast('cuda', dtype=torch.bfloat16):
                loss = nn.functional.mse_loss(stages[1](stages[0](x)), x)
            (loss / N).backward()
        opt.step()

    runs = [('plain loop', plain)]
    for name, opts in (('1f1b', {}), ('zb-h1', {}), ('interleaved-1f1b', dict(chunks=2))):
        for trace in (False, True):
            s = make_schedule(name, 1, N, **opts)
            mods = _mlp(width) if s.num_stages == 2 else [nn.Sequential(*_mlp(width))]
            rt = PipelineRuntime(s, [m.to(dev) for m in mods], nn.functional.mse_loss, trace=trace)
            ropt = torch.optim.SGD(list(rt.parameters()), lr=1e-4)
            runs.append((f"PipelineRuntime {name}" + (' + CUDA-event trace' if trace else ''),
                         lambda rt=rt, ropt=ropt: rt.step(xs, xs, optimizer=ropt)))
    times = {what: [] for what, _ in runs}
    for _ in range(rounds):  # the variants take turns, so drift of the GPU clock hits all of them alike
        for what, fn in runs: times[what].append(_timed(fn, steps=10, warmup=2))
    rows_out = [(what, statistics.median(ts), '') for what, ts in times.items()]
    base = rows_out[0][1]
    print(f"\n### Runtime overhead on one GPU ({torch.cuda.get_device_name(dev)}, torch {torch.__version__}): "
          f"MLP 8 x Linear({width},{width}) in 2 stages, bf16 autocast, N={N} micro-batches of {rows}\n")
    print("| what | median step (ms) | vs plain |")
    print("|---|---|---|")
    for what, t, _ in rows_out: print(f"| {what} | {t * 1e3:.2f} | {t / base:.3f} |")


if __name__ == '__main__':
    main()
