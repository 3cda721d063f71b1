"""Schedule benchmarks: speed of the schedule pipeline, and every schedule beside its closed form and torch's order.

1. Speed: generation + validation + lowering + simulation of Chimera (targets: D=16, N=64 under 20 ms; D=64, N=256
   under 300 ms), and our 1F1B beside torch.distributed.pipelining's own path for 1F1B at the same size (its compute
   order per rank, `_validate_schedule`, `_add_send_recv`, `_simulate_comms_compute`).
2. Table: every schedule's simulated makespan and peak activations (Ma units) next to its closed form and next to
   torch.distributed.pipelining's order of the same name where one exists (its `_calculate_single_rank_operations`,
   read with `torch_order.from_torch` and simulated with the same costs), for F:B:W in {1:1:0, 1:2:0, 1:1:1, 2:2:1}.

Run: .venv/bin/python bench/bench_schedules.py [speed] [table]   (prints markdown tables; results go in BENCHMARKS.md)
"""
import platform, statistics, sys, time, types
import torch
from torch.distributed.pipelining import schedules as tsched
from chimera_nb.schedules import make_schedule
from chimera_nb.ir import Schedule
from chimera_nb.torch_order import from_torch
from chimera_nb.simulate import simulate, Costs, closed_form


def best_of(fn, repeat):
    "Median and min wall time of `fn` over `repeat` runs (seconds)."
    ts = []
    for _ in range(repeat):
        t = time.perf_counter(); fn(); ts.append(time.perf_counter() - t)
    return statistics.median(ts), min(ts)


def ours(name, D, N, **opts):
    "Generate (validated by make_schedule), lower and simulate."
    return simulate(make_schedule(name, D, N, **opts), Costs(1, 1))


def torch_order(cls, D, N, n_local=1):
    "torch's compute-only order of schedule class `cls` for D ranks, without building stages or a process group."
    rounds = max(1, N // D)
    fake = types.SimpleNamespace(n_local_stages=n_local, pp_group_size=D, microbatches_per_round=N // rounds,
                                 number_of_rounds=rounds, _n_microbatches=N, _num_stages=D * n_local, num_stages=D * n_local,
                                 _stages=[None] * n_local)
    return {r: cls._calculate_single_rank_operations(fake, r) for r in range(D)}


def torch_1f1b(D, N):
    "torch.distributed.pipelining: 1F1B compute order per rank, add send/recv, unit-time simulation."
    order = torch_order(tsched.ScheduleInterleaved1F1B, D, N)
    tsched._validate_schedule(order, D, D, N)
    comms = tsched._add_send_recv({r: [a for a in o if a is not None] for r, o in order.items()}, lambda s: s, D)
    return tsched._simulate_comms_compute(comms, lambda s: s, D)


def speed():
    rows = []
    for D, N, target in ((16, 64, 0.02), (64, 256, 0.3)):
        reps = 9 if D <= 16 else 5
        for label, fn in (('chimera (ours)', lambda: ours('chimera', D, N)),
                          ('1f1b (ours)', lambda: ours('1f1b', D, N)),
                          ('1f1b (torch.distributed.pipelining)', lambda: torch_1f1b(D, N))):
            med, best = best_of(fn, reps)
            rows.append((D, N, label, med * 1e3, best * 1e3, target * 1e3 if 'chimera' in label else None))
    print(f"\n### Generation + validation + lowering + simulation\n\nmachine: {platform.machine()}, python "
          f"{platform.python_version()}, torch {torch.__version__}\n")
    print("| D | N | what | median ms | min ms | target ms |")
    print("|---|---|---|---|---|---|")
    for D, N, label, med, best, tgt in rows:
        print(f"| {D} | {N} | {label} | {med:.1f} | {best:.1f} | {'' if tgt is None else f'< {tgt:.0f}'} |")
    ok = all(med <= tgt for D, N, label, med, best, tgt in rows if tgt is not None)
    print("\ntargets met" if ok else "\nTARGET MISSED")


# our schedule -> torch's class and local stages per rank; torch's GPipe and 1F1B are single-stage classes whose
# order lives in their step() code, not in an action list, so they have no column here
TORCH_SAME_NAME = {'interleaved-1f1b chunks=2': (tsched.ScheduleInterleaved1F1B, 2),
    'zb-h1': (tsched.ScheduleInterleavedZeroBubble, 1), 'dualpipev': (tsched.ScheduleDualPipeV, 2)}
OURS = [('gpipe', {}), ('1f1b', {}), ('gems', {}), ('chimera', {}), ('chimera', dict(pipes=4)), ('chimera', dict(concat='doubling')),
        ('chimera', dict(concat='halving')), ('chimera', dict(concat='zero-bubble')), ('interleaved-1f1b', dict(chunks=2)),
        ('zb-h1', {}), ('dualpipev', {})]


def table(D=8, N=16):
    ratios = ((1, 1, 0), (1, 2, 0), (1, 1, 1), (2, 2, 1))
    print(f"\n### Every schedule, D={D}, N={N}: simulated makespan (peak activations, Ma) | closed form | torch's order\n")
    print("F:B:W = forward : input-gradient : weight-gradient time (B' = B + W is the full backward); free communication;"
          " recomputation counted as one forward. A closed form holds under the assumption in brackets (F = B': equal forward"
          " and full backward; B' = 2F: the paper's doubling/halving regime; W <= min(F, B): Zero Bubble's).\n")
    print("| schedule | " + " | ".join(f"{f}:{b}:{w} ours | closed form | torch" for f, b, w in ratios) + " |")
    print("|---|" + "---|---|---|" * len(ratios))
    for name, opts in OURS:
        s = make_schedule(name, D, N, **opts)
        label = name + ''.join(f" {k}={v}" for k, v in opts.items())
        cells = []
        for f, b, w in ratios:
            c = Costs(f, b, w)
            tl = simulate(s, c)
            cf = closed_form(name, D, N, c, **opts)
            cfm = cf['makespan']
            cf_txt = '' if cfm is None else f"{cfm:g}" + (f" ({cf['note']})" if cf['note'] else '')
            t = ''
            if label in TORCH_SAME_NAME:
                cls, local = TORCH_SAME_NAME[label]
                ts = from_torch(torch_order(cls, D, N, local), name=label)
                ttl = simulate(ts, c)
                t = f"{ttl.makespan:g} ({max(ttl.peak_activations):g})"
            cells += [f"{tl.makespan:g} ({max(tl.peak_activations):g})", cf_txt, t]
        print(f"| {label} | " + " | ".join(cells) + " |")


if __name__ == '__main__':
    parts = sys.argv[1:] or ['speed', 'table']
    if 'speed' in parts: speed()
    if 'table' in parts: table()
