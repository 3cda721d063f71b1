"""Schedule search benchmark (issue 24): the searched schedule beside the best fixed schedule that fits and the lower bound.

Profiles (times in units of one even stage's forward): uniform F = B = W (split backward); uniform B = 2F (full
backward); bert-tiny-like (the stage times measured in BENCHMARKS.md section 5 at D = 4: a light embedding stage and a
light head, blocks in between, backward split half/half into B and W); GPT-2-like (the head costs ~3 blocks: the last
stage 3x, split backward); costly p2p (F = B = W, every message half a forward). D in {4, 8, 16, 32}, N in {D, 2D, 4D},
memory = 1F1B's peak = Chimera's peak = D Ma per rank.

Targets: never worse than the best fixed schedule that fits; within 2% of the lower bound (or proven optimal) for
D <= 8, N <= 16 in <= 30 s; within 5% for D = 32, N = 64 in <= 10 s; on the uneven profiles shorter than every fixed
schedule of the answer's placement. Rows that miss a target say by how much.

Run: PYTHONPATH=$PWD .venv/bin/python bench/bench_search.py [--quick]   (prints a markdown table; results in BENCHMARKS.md)
"""
import argparse, math, os, platform, time
from chimera_nb.simulate import Costs
from chimera_nb.search import search_schedule

BERT_F = (1.03, 6.35, 6.5, 1.68)   # ms per stage, bert-tiny masked-LM at D = 4 (BENCHMARKS.md section 5)
BERT_B = (0.57, 4.02, 4.07, 2.63)


def bert_like(D):
    "Embedding stage, D - 2 block stages, head stage, scaled so a block's forward is 1; backward split half/half."
    blk_f, blk_b = (BERT_F[1] + BERT_F[2]) / 2, (BERT_B[1] + BERT_B[2]) / 2
    f = [BERT_F[0] / blk_f] + [1.0] * (D - 2) + [BERT_F[3] / blk_f]
    b = [BERT_B[0] / blk_f] + [blk_b / blk_f] * (D - 2) + [BERT_B[3] / blk_f]
    return Costs(f, [x / 2 for x in b], [x / 2 for x in b])


def gpt2_like(D):
    h = [1.0] * (D - 1) + [3.0]
    return Costs(h, h, h)


PROFILES = {
    'uniform F=B=W': lambda D: Costs(1, 1, 1),
    'uniform B=2F': lambda D: Costs(1, 2),
    'bert-tiny-like': bert_like,
    'GPT-2-like (head 3x)': gpt2_like,
    'costly p2p (0.5 F)': lambda D: Costs(1, 1, 1, p2p=0.5),
}
UNEVEN = ('bert-tiny-like', 'GPT-2-like (head 3x)')


def limit(D, N):
    "The search's time limit (for the whole call, simulating every fixed schedule included): the targets, less a margin."
    return 29.0 if D <= 8 and N <= 16 else 9.5


def verdict(profile, D, N, r, fixed_same):
    "Which targets this row is held to, and whether it meets them (with by how much when not)."
    out = []
    if r.makespan > r.best_fixed_makespan + 1e-9: out.append(f"WORSE than fixed by {r.makespan / r.best_fixed_makespan - 1:.1%}")
    if D <= 8 and N <= 16:
        ok = r.optimal or r.gap <= 0.02
        out.append('optimal' if r.optimal else f"gap {r.gap:.1%} {'<= 2%' if ok else '> 2%: MISSED'}")
        if r.seconds > 30: out.append(f"{r.seconds:.0f} s > 30 s: MISSED")
    elif D == 32 and N == 64:
        out.append(f"gap {r.gap:.1%} {'<= 5%' if r.gap <= 0.05 else '> 5%: MISSED'}")
        if r.seconds > 10: out.append(f"{r.seconds:.1f} s > 10 s: MISSED")
    if profile in UNEVEN and fixed_same is not None:
        d = r.makespan / fixed_same - 1
        why = '' if d < -1e-9 else ' (ties: that fixed order is optimal, = bound)' if fixed_same <= r.lower_bound * (1 + 1e-9) \
              else ' (not shorter: MISSED)'
        out.append(f"vs best fixed {r.placement}: {d:+.1%}{why}")
    return '; '.join(out)


def run(quick):
    Ds = (4, 8) if quick else (4, 8, 16, 32)
    mult = (1, 2) if quick else (1, 2, 4)
    print(f"\n### Schedule search, memory = D Ma per rank (1F1B's and Chimera's peak), placements single, v, bidirectional\n")
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores (shared), python {platform.python_version()}; "
          f"time_limit 29 s for D <= 8 and N <= 16, else 9.5 s, for the whole call (simulating every fixed schedule included)\n")
    print("| profile | D | N | searched | placement | found by | best fixed (fits) | fixed | lower bound | gap | vs fixed | time s | targets |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    rows = []
    for name, make in PROFILES.items():
        for D in Ds:
            for k in mult:
                N = k * D
                r = search_schedule(D, N, make(D), memory=D, time_limit=limit(D, N), workers=min(2, os.cpu_count() or 1))
                same = r.compared[(r.compared.placement == r.placement) & (r.compared.schedule != 'search')]
                fixed_same = same.makespan.min() if len(same) else None
                v = verdict(name, D, N, r, fixed_same)
                rows.append((name, D, N, r, v))
                print(f"| {name} | {D} | {N} | {r.makespan:.4g} | {r.placement} | {r.method} | {r.best_fixed or '-'} | "
                      f"{r.best_fixed_makespan:.4g} | {r.lower_bound:.4g} | {r.gap:.1%} | "
                      f"{r.makespan / r.best_fixed_makespan - 1:+.1%} | {r.seconds:.1f} | {v} |", flush=True)
    worse = sum(r.makespan > r.best_fixed_makespan + 1e-9 for *_, r, _ in rows)
    small = [(n, D, N, r) for n, D, N, r, _ in rows if D <= 8 and N <= 16]
    print(f"\nnever worse than the best fixed schedule that fits: {len(rows) - worse}/{len(rows)}; "
          f"D <= 8, N <= 16 within 2% or optimal in <= 30 s: {sum((r.optimal or r.gap <= 0.02) and r.seconds <= 30 for *_, r in small)}/{len(small)}")


if __name__ == '__main__':
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('--quick', action='store_true', help='D in {4, 8}, N in {D, 2D} only')
    run(ap.parse_args().quick)
