"""Generation + validation + simulation time of schedules, beside torch.distributed.pipelining's own
unit-time simulator (`_simulate_comms_compute`) of 1F1B at the same size.

Run: .venv/bin/python bench/bench_schedules.py   (prints a markdown table; results go in BENCHMARKS.md)
Targets (interactive use): Chimera D=16, N=64 under 50 ms; D=64, N=256 under 1 s.
"""
import platform, statistics, time, types
import torch
from torch.distributed.pipelining import schedules as tsched
from chimera_nb.schedules import make_schedule
from chimera_nb.simulate import simulate, Costs

def best_of(fn, repeat):
    "Median and min wall time of `fn` over `repeat` runs (seconds)."
    ts = []
    for _ in range(repeat):
        t = time.perf_counter(); fn(); ts.append(time.perf_counter() - t)
    return statistics.median(ts), min(ts)

def ours(name, D, N, **opts):
    "Generate (validated by make_schedule) and simulate."
    s = make_schedule(name, D, N, **opts)
    return simulate(s, Costs(1, 1))

def torch_1f1b(D, N):
    "torch.distributed.pipelining: 1F1B compute order per rank, add send/recv, unit-time simulation."
    fake = types.SimpleNamespace(n_local_stages=1, pp_group_size=D, microbatches_per_round=N, _n_microbatches=N)
    order = {r: tsched.ScheduleInterleaved1F1B._calculate_single_rank_operations(fake, r) for r in range(D)}
    tsched._validate_schedule(order, D, D, N)
    comms = tsched._add_send_recv({r: [a for a in o if a is not None] for r, o in order.items()}, lambda s: s, D)
    return tsched._simulate_comms_compute(comms, lambda s: s, D)

def main():
    rows = []
    for D, N, target in ((16, 64, 0.05), (64, 256, 1.0)):
        reps = 7 if D <= 16 else 3
        for label, fn in ((f'chimera (ours)', lambda: ours('chimera', D, N)),
                          (f'1f1b (ours)', lambda: ours('1f1b', D, N)),
                          (f'1f1b (torch.distributed.pipelining)', lambda: torch_1f1b(D, N))):
            med, best = best_of(fn, reps)
            rows.append((D, N, label, med * 1e3, best * 1e3, target * 1e3 if 'chimera' in label else None))
    print(f"machine: {platform.processor() or platform.machine()}, {torch.get_num_threads()} threads, python {platform.python_version()}, torch {torch.__version__}")
    print("| D | N | what | median ms | min ms | target ms |")
    print("|---|---|---|---|---|---|")
    for D, N, label, med, best, tgt in rows:
        print(f"| {D} | {N} | {label} | {med:.1f} | {best:.1f} | {'' if tgt is None else f'< {tgt:.0f}'} |")
    ok = all(med <= tgt for D, N, label, med, best, tgt in rows if tgt is not None)
    print("targets met" if ok else "TARGET MISSED")

if __name__ == '__main__':
    main()
