"""The search against the Zero Bubble authors' own schedulers (issue 37): their heuristic (single placement, ZB-1p and
ZB-2p memory) and ZB-V (V placement, 1F1B's memory), on the (p, m) shapes of their Table 9, two cost profiles, and
two memory rules (W freeing all, or keeping half: their M_W = M_B / 2). Their results are reference data
(bench/data/zb_reference.csv, made by bench/zb_reference.py from their code); ours are searched here with the same
memory rule and cap, by both objectives: the longest rank's span (their measure) and the makespan.

    PYTHONPATH=$PWD .venv/bin/python bench/bench_zb.py [--quick] [--time-limit 30]
"""
import argparse, csv, math, pathlib, time
from chimera_nb.simulate import Costs
from chimera_nb.search import search_schedule

def ours(row:dict, objective:str, limit:float):
    v = row['placement'] == 'v'
    k = 2.0 if v else 1.0   # their V costs are per chunk: a rank's stage is two chunks
    c = Costs(float(row['F']) * k, float(row['B']) * k, float(row['W']) * k, p2p=float(row['p2p']))
    return search_schedule(int(row['D']), int(row['N']), c, memory=float(row['memory']), placements=(row['placement'],),
                           time_limit=limit, w_keeps=float(row['w_keeps']), objective=objective, progress=False)

def main():
    ap = argparse.ArgumentParser(); ap.add_argument('--quick', action='store_true'); ap.add_argument('--time-limit', type=float, default=30.0)
    a = ap.parse_args()
    rows = list(csv.DictReader(open(pathlib.Path(__file__).parent / 'data' / 'zb_reference.csv')))
    if a.quick: rows = [r for r in rows if r['D'] == '8' and r['N'] in ('24', '64')]
    print('| profile | D | N | W keeps | memory | placement | theirs span | ours span | bound | Δ span | theirs makespan | ours makespan | Δ makespan | s (span, makespan) |')
    print('|---|---|---|---|---|---|---|---|---|---|---|---|---|---|')
    worse = 0
    for r in rows:
        t_span, t_mk = float(r['span']), float(r['makespan'])
        s, m = ours(r, 'span', a.time_limit), ours(r, 'makespan', a.time_limit)
        d_s = s.span / t_span - 1 if math.isfinite(t_span) else -math.inf
        d_m = m.makespan / t_mk - 1 if math.isfinite(t_mk) else -math.inf
        worse += d_s > 1e-9 or d_m > 1e-9
        print(f"| {r['profile']} | {r['D']} | {r['N']} | {float(r['w_keeps']):g} | {float(r['memory']):g} | {r['placement']} | {t_span:.4g} | "
              f"{s.span:.4g} | {s.lower_bound:.4g} | {d_s:+.2%} | {t_mk:.4g} | {m.makespan:.4g} | {d_m:+.2%} | {s.seconds:.1f}, {m.seconds:.1f} |", flush=True)
    print(f"\nworse than theirs: {worse} of {len(rows)}")

if __name__ == '__main__': main()
