"""Predicted vs measured iteration time on this machine, and whether the autotuner's first choice is the measured best.

1. Real compute, D = 2 ranks x 1 thread (gloo): a tiny BERT (masked-LM on random tokens) and an MLP, over schedules
   (GPipe, 1F1B, Chimera) and (micro-batch size B, micro-batches N) splits of one global batch. Each model's layers are
   profiled at every B here (measure.profile_layers_as; each layer's times then fitted as a + b*B over the three
   sizes, see measure.fit_sizes) and the links measured between two real processes
   (measure.measure_comm); the runtime's stages are the profile's time-balanced split.
2. Emulated compute, D = 4 and 8 ranks: the runtime sleeps each action's modelled time (F = 2 ms + 1.5 ms per example,
   B = 2F), real messages over gloo; the same schedules and splits.

Predicted = perf_model.predict(..., method='simulate') (the lowered program with per-stage costs) and Eq. (1)
('analytic'), from the profile ("uncalibrated": layers profiled in D processes at once, as the runs load the cores, and the
runtime's time per hop measured once per process count by measure.measure_overhead, a zero-compute step, and its
cost per real compute action once by measure.measure_action_overhead; nothing fitted to any run), the same with the
real runs' stages profiled as stages, D processes at once (how the training summary profiles before a run), and after perf_model.calibrate on ONE traced run per group
(Chimera at the middle B, its traced step nearest the median: per-stage time factors, the time per hop fitted from zero up to
where the compute ends, and the all-reduces' time to the rest of the step; --calibrate-on=1f1b calibrates on 1F1B, which
does not all-reduce at W = 1, as the tables before 2026-11-26 did); the
error is averaged over the other runs.
Measured = median of 10 steps after warm-up, barrier to barrier, configurations stepping in turn; "halves differ" is how far
the medians of its first and last 5 steps differ, the floor under any prediction's error on this host. The autotuner ranks
the same candidates (autotune(..., method='simulate')) and its first choice is compared with the measured best.

Run: PYTHONPATH=. .venv/bin/python bench/bench_perf_model.py [--calibrate-on=1f1b]     (about 85 s on 2 cores)
"""
import dataclasses, statistics, sys, time
import torch
import torch.distributed as dist
from torch import nn
from chimera_nb.autotune import autotune
from chimera_nb.schedules import make_schedule
from chimera_nb.launch import launch_local
from chimera_nb.models import build
from chimera_nb.partition import Stage
from chimera_nb.profile import LayerProfile
from chimera_nb.perf_model import predict, calibrate
from chimera_nb.profile import Profile
from chimera_nb.measure import measure_comm, measure_overhead, measure_action_overhead
from chimera_nb.profile import profile_layers_as, fit_sizes
from chimera_nb.runtime import PipelineRuntime
from chimera_nb.simulate import Costs

SCHEDS = ('gpipe', '1f1b', 'chimera')
# the calibration run of each group: Chimera's all-reduces let calibrate fit their time too (--calibrate-on=1f1b: the tables before 2026-11-26)
CALIBRATE_ON = next((a.split('=', 1)[1] for a in sys.argv[1:] if a.startswith('--calibrate-on=')), 'chimera')
SEQ, WIDTH, G_REAL = 32, 768, 32
SPLITS_REAL = [(4, 8), (8, 4), (16, 2)]          # (B, N) with B x N = 32
STEPS, WARMUP = 10, 2   # two halves of 5: how far a configuration's median moves when measured again (the floor under any model's error)


def mlp_layers(seed=0):
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(8):
        lin = nn.Linear(WIDTH, WIDTH)
        with torch.no_grad(): lin.weight.copy_(torch.randn(WIDTH, WIDTH, generator=g) / WIDTH ** 0.5)
        out.append(nn.Sequential(lin, nn.GELU()))
    return out


def model_of(kind):
    "(layers, loss_fn, batch(n) -> (inputs, targets), ties)"
    if kind == 'bert-tiny':
        m = build('bert-tiny', 'mlm', seed=1, attn_implementation='sdpa')
        def batch(n, seed=0):
            ids = torch.randint(0, m.config.vocab_size, (n, SEQ), generator=torch.Generator().manual_seed(seed))
            return ids, ids.clone()
        return m.layers, m.loss_fn, batch, m.ties
    def batch(n, seed=0):
        g = torch.Generator().manual_seed(seed)
        return torch.randn(n, WIDTH, generator=g), torch.randn(n, WIDTH, generator=g)
    return mlp_layers(), nn.functional.mse_loss, batch, {}


def _stages(kind, bounds):
    layers, loss_fn, batch, ties = model_of(kind)
    stages = [Stage(layers[a:b], a) for a, b in zip(bounds, bounds[1:])]
    where = lambda i: next(k for k in range(len(bounds) - 1) if bounds[k] <= i < bounds[k + 1])
    t = {key: [(where(i), f"layers.{i - bounds[where(i)]}.{n}") for i, n in places] for key, places in ties.items()}
    t = {k: v for k, v in t.items() if len({s for s, _ in v}) > 1 or len(v) > 1}
    return stages, loss_fn, batch, t


def _runs(rank, world, plan, cal_index):
    """plan: [(kind, schedule, B, N, boundaries)]; kind 'emulated' carries Costs in place of boundaries.
    Every configuration steps in turn (background load hits all alike), all traced alike (the calibration run needs its
    timeline); returns the median step seconds of each, how far the medians of the two halves of its steps differ, and the
    timeline of plan[cal_index]."""
    rts, data = [], []
    for i, (kind, name, B, N, extra) in enumerate(plan):
        s = make_schedule(name, world, N)
        if kind == 'emulated':
            rts.append(PipelineRuntime(s, None, emulate=extra, shapes=(B, 64), trace=True)); data.append((None, None))
        else:
            stages, loss_fn, batch, ties = _stages(kind, extra)
            rts.append(PipelineRuntime(s, stages, loss_fn, ties=ties, trace=True)); data.append(batch(B * N))
    ts, tls = [[] for _ in plan], []
    for step in range(WARMUP + STEPS):
        for i, rt in enumerate(rts):
            dist.barrier(); t = time.perf_counter(); rt.step(*data[i]) if data[i][0] is not None else rt.step(); dist.barrier()
            if step >= WARMUP: ts[i].append(time.perf_counter() - t)
            if step >= WARMUP and i == cal_index: tls.append(rt.timeline)
    med, h = [statistics.median(x) for x in ts], STEPS // 2
    again = [abs(statistics.median(x[:h]) / statistics.median(x[h:]) - 1) for x in ts]
    # calibrate on the traced step nearest the median: one step slowed by the host would skew the fitted overhead
    return med, again, min(tls, key=lambda tl: abs(tl.makespan - med[cal_index]))


def _stage_level(prof, D, k=None, o=None):
    "`prof` as D stage-level layers, times scaled per stage by k, extra p2p latency o."
    sp = prof.stage_profiles(D)
    if k is not None: sp = [p._replace(forward_s=p.forward_s * kf, backward_s=p.backward_s * kb) for p, (kf, kb) in zip(sp, k)]
    out = dataclasses.replace(prof, layers=sp, ties=prof.stage_ties(D), fixed=[])
    return dataclasses.replace(out, p2p_latency=o) if o is not None else out


def _profile_rank(rank, world, kind, B, comm):
    "This rank's profile of the model's layers at B (every rank profiles at once: the cores are as busy as in a run)."
    torch.set_num_threads(1)
    layers, loss_fn, batch, ties = model_of(kind)
    x, y = batch(B)
    return profile_layers_as(kind, layers, x, loss_fn, y, B, SEQ if kind == 'bert-tiny' else 0, comm, repeats=7, ties=ties)


def profile_loaded(kind, B, comm, world=2):
    "The layers' times averaged over `world` processes profiling at once."
    ps = launch_local(_profile_rank, world, kind, B, comm, timeout=600)
    lay = [l._replace(forward_s=statistics.fmean(p.layers[i].forward_s for p in ps), backward_s=statistics.fmean(p.layers[i].backward_s for p in ps))
           for i, l in enumerate(ps[0].layers)]
    return dataclasses.replace(ps[0], layers=lay)


def _stage_profile_rank(rank, world, kind, B, bounds, comm):
    "This rank's profile of the stages at `bounds`, every rank at once (how the training summary profiles: stage by stage, the cores loaded)."
    torch.set_num_threads(1)
    stages, loss_fn, batch, _ = _stages(kind, bounds)
    x, y = batch(B)
    return profile_layers_as(kind, stages, x, loss_fn, y, B, SEQ if kind == 'bert-tiny' else 0, comm, repeats=7)


def stage_profile_loaded(prof, kind, B, comm, world=2):
    "`prof` (a layer profile) with its D stages profiled as stages, in `world` processes at once, times averaged over them."
    bounds = prof.boundaries(world)
    ps = launch_local(_stage_profile_rank, world, kind, B, bounds, comm, timeout=600)
    lay = [l._replace(forward_s=statistics.fmean(p.layers[i].forward_s for p in ps), backward_s=statistics.fmean(p.layers[i].backward_s for p in ps))
           for i, l in enumerate(ps[0].layers)]
    return dataclasses.replace(_stage_level(prof, world), layers=lay)


def emulated_profile(D, B, comm):
    f = 2e-3 + 1.5e-3 * B
    lay = [LayerProfile(f'stage{i}', 0, 0, f, 2 * f, 0, B * 64 * 4, B * 64 * 4, 0) for i in range(D)]
    return Profile(f'emulated-{D}', B, 0, 'float32', lay, comm.p2p_latency, comm.p2p_bandwidth, comm.ar_alpha, comm.ar_beta, comm_overlaps=True,
                   device='emulated (sleep)', source='measured')


def main():
    t0 = time.time()
    torch.set_num_threads(1)
    comm = measure_comm(2, sizes=(4096, 65536, 1 << 20, 4 << 20, 16 << 20), repeats=5)
    print(f"links (gloo, 2 processes): p2p {comm.p2p_latency * 1e6:.0f} us + {comm.p2p_bandwidth / 1e9:.2f} GB/s, "
          f"all-reduce alpha {comm.ar_alpha * 1e6:.0f} us, beta {1 / comm.ar_beta / 1e9 if comm.ar_beta else float('inf'):.2f} GB/s",
          flush=True)
    hop = {D: measure_overhead(D) for D in (2, 4, 8)}   # the runtime's time per hop, once per process count
    act = measure_action_overhead(2)   # the runtime's own cost per real compute action (autograd, payloads)
    print("runtime per hop (zero-compute 1F1B step): " + ", ".join(f"D={D}: {v * 1e3:.2f} ms" for D, v in hop.items())
          + f"; per real compute action: {act * 1e3:.3f} ms", flush=True)
    rows, groups, cals = [], {}, {}
    work, staged = [], {}   # (group, D, plan, {B: profile}); {kind: {B: the stages profiled as stages}}
    for kind in ('bert-tiny', 'mlp'):
        fitted = fit_sizes([profile_loaded(kind, B, comm._replace(p2p_latency=hop[2])) for B, N in SPLITS_REAL])
        profs = {B: dataclasses.replace(fitted.at(B), action_overhead=act) for B, N in SPLITS_REAL}
        staged[kind] = {B: stage_profile_loaded(p, kind, B, comm._replace(p2p_latency=hop[2])) for B, p in profs.items()}
        work.append((f'real {kind}', 2, [(kind, name, B, N, profs[B].boundaries(2)) for B, N in SPLITS_REAL for name in SCHEDS], profs))
    for D, splits in ((4, [(1, 16), (2, 8), (4, 4)]), (8, [(2, 16), (4, 8)])):
        profs = {B: emulated_profile(D, B, comm._replace(p2p_latency=hop[D])) for B, _ in splits}
        costs = {B: Costs([l.forward_s for l in p.layers], [l.backward_s for l in p.layers]) for B, p in profs.items()}
        work.append(('emulated', D, [('emulated', name, B, N, costs[B]) for B, N in splits for name in SCHEDS], profs))
    print(f"profiled in {time.time() - t0:.0f} s", flush=True)
    for group, D, plan, profs in work:
        # calibration: one run at the middle split; its traced step fits per-stage times, the time per hop and the all-reduces
        mid = sorted({B for _, _, B, _, _ in plan})[len({B for _, _, B, _, _ in plan}) // 2]
        ci = next(i for i, (_, name, B, _, _) in enumerate(plan) if name == CALIBRATE_ON and B == mid)
        meas, again, tl = launch_local(_runs, D, plan, ci, timeout=900)[0]
        s_cal = make_schedule(CALIBRATE_ON, D, plan[ci][3])
        base = _stage_level(profs[mid], D)
        cal = calibrate(base, tl, s_cal, target=meas[ci])
        k = [(c.forward_s / b.forward_s, c.backward_s / b.backward_s) for c, b in zip(cal.layers, base.layers)]
        cals[group, D] = {B: dataclasses.replace(_stage_level(p, D, k, cal.p2p_latency), action_overhead=0.0,   # measured times include it
                                                 ar_alpha=cal.ar_alpha, ar_beta=cal.ar_beta)   # fitted when the calibration run all-reduces
                          for B, p in profs.items()}
        print(f"{group} D={D}: {len(plan)} runs; calibrated on {CALIBRATE_ON} B={mid}: stage time x{statistics.fmean(f for f, _ in k):.2f} (F) "
              f"x{statistics.fmean(b for _, b in k):.2f} (B), hop {cal.p2p_latency * 1e3:.2f} ms (profile's {profs[mid].p2p_latency * 1e3:.2f}), "
              f"all-reduce x{cal.ar_beta / base.ar_beta if base.ar_beta else float('nan'):.2f} of the measured links ({time.time() - t0:.0f} s)", flush=True)
        for i, ((kind, name, B, N, _), m, rep) in enumerate(zip(plan, meas, again)):
            s = make_schedule(name, D, N)
            raw, sim, ana = (predict(p, s, method=k_, memory=False).iteration_s
                             for p, k_ in ((_stage_level(profs[B], D), 'simulate'), (cals[group, D][B], 'simulate'), (cals[group, D][B], 'analytic')))
            st = predict(staged[kind][B], s, memory=False).iteration_s if kind in staged else raw   # emulated: its stages are its layers
            rows.append(dict(run=group, D=D, schedule=name, B=B, N=N, measured=m, raw=raw, staged=st, simulate=sim, analytic=ana, cal=i == ci, again=rep))
            groups.setdefault((group, D), {})[(name, B, N)] = m
    # the table
    print("\n| run | D | schedule | B | N | measured (ms) | halves differ | uncalibrated profile, simulator (ms) | error | stages profiled as stages (ms) | error | calibrated, simulator (ms) | error | calibrated, Eq. (1) (ms) | error |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    er, est, es, ea = [], [], [], []
    for r in rows:
        e0, e3, e1, e2 = (r[k] / r['measured'] - 1 for k in ('raw', 'staged', 'simulate', 'analytic'))
        if not r['cal']: er.append(abs(e0)); est.append(abs(e3)); es.append(abs(e1)); ea.append(abs(e2))
        print(f"| {r['run']} | {r['D']} | {r['schedule']}{' (calibration run)' if r['cal'] else ''} | {r['B']} | {r['N']} | {r['measured'] * 1e3:.1f} | {r['again']:.1%} | "
              f"{r['raw'] * 1e3:.1f} | {e0:+.1%} | {r['staged'] * 1e3:.1f} | {e3:+.1%} | {r['simulate'] * 1e3:.1f} | {e1:+.1%} | {r['analytic'] * 1e3:.1f} | {e2:+.1%} |")
    print(f"\nmean absolute error over the {len(es)} runs that were not calibrated on: simulator {statistics.fmean(es):.1%} "
          f"(uncalibrated profile {statistics.fmean(er):.1%}; its stages profiled as stages {statistics.fmean(est):.1%}), Eq. (1) {statistics.fmean(ea):.1%} (target <= 10%); the same runs' two halves differ by {statistics.fmean(r['again'] for r in rows):.1%} on average")
    for g in dict.fromkeys((r['run'], r['D']) for r in rows):
        sub = [abs(r['simulate'] / r['measured'] - 1) for r in rows if (r['run'], r['D']) == g and not r['cal']]
        again = statistics.fmean(r['again'] for r in rows if (r['run'], r['D']) == g)
        print(f"  {g[0]} D={g[1]}: simulator MAE {statistics.fmean(sub):.1%}; measured again (two halves of its steps): {again:.1%} apart")
    # the autotuner's first choice in each group (same global batch, the same candidates)
    print("\n| group | global batch | autotuner's first choice (among the runs) | its measured time (ms) | measured best | best (ms) | within 5% | first over all variants (not run) |")
    print("|---|---|---|---|---|---|---|---|")
    for (run, D), meas in groups.items():
        Bs = sorted({B for _, B, _ in meas})
        pmap = {B: cals[run, D][B] for B in Bs}
        G = next(B * N for _, B, N in meas)
        tu = autotune(D, G, profile=pmap, schedules=list(SCHEDS), micro_batch_sizes=Bs, depths=[D], recompute=[False],
                      method='simulate', memory_limit=1e15)
        # its first choice among the configurations measured (it also ranks Chimera's other variants, not run here)
        c = next(x for x in tu.ranking['spec'] if (x.schedule, x.B, x.N) in meas and x.pipes == 2 and x.concat == 'direct')
        first = (c.schedule, c.B, c.N)
        best = min(meas, key=meas.get)
        ok = meas[first] <= 1.05 * meas[best]
        print(f"| {run} D={D} | {G} | {c.schedule} B={c.B} N={c.N} | {meas[first] * 1e3:.1f} | {best[0]} B={best[1]} N={best[2]} | "
              f"{meas[best] * 1e3:.1f} | {'yes' if ok else 'no'} ({meas[first] / meas[best] - 1:+.1%}) | "
              f"{tu.ranking.iloc[0]['label']} B={tu.best.B} N={tu.best.N} |")
    print(f"\ntotal {time.time() - t0:.0f} s")


if __name__ == '__main__':
    main()
