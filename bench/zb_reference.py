"""Record the Zero Bubble authors' own schedulers' results as reference data for `bench_zb.py` (issue 37).

Runs their heuristic (`zb.py`: `Graph.manual_order`, best of its 8 flag settings) and ZB-V (`zbv.py`: `try_v_schedule`,
best of 4) from a checkout of github.com/sail-sg/zero-bubble-pipeline-parallelism (their code is read from there, not
copied here), converts each order to ours and times it with our rules. Writes bench/data/zb_reference.csv.

    python bench/zb_reference.py /path/to/zero-bubble-pipeline-parallelism   # a checkout or `git worktree` of theirs
"""
import csv, dataclasses, itertools, math, pathlib, sys, subprocess
from typing import List, Optional, Set
from chimera_nb.ir import Action
from chimera_nb.simulate import Costs
from chimera_nb.search import _make_problem, _walk, _peaks, _value

SCHED = 'megatron/core/pipeline_parallel/zerobubble/scheduler'
SETTINGS = [(p, m) for p in (8, 16, 32) for m in (3 * p, 4 * p, 8 * p)]          # the (p, m) shapes of their Table 9
PROFILES = {'uniform F=B=W, p2p 0.1': (1, 1, 1, 0.1), 'ZB-like F:B:W = 1:1:0.5, p2p 0.05': (1, 1, 0.5, 0.05)}

@dataclasses.dataclass
class GraphConfig:   # the fields of their graph.GraphConfig that zb.py reads
    mem_f: List[float] = None; mem_b: List[float] = None; mem_w: List[float] = None; max_mem: Optional[List[float]] = None
    cost_f: List[float] = None; cost_b: List[float] = None; cost_w: List[float] = None; cost_comm: float = 0.0
    print_scaling: int = 1; max_chunks: int = 1; n_stages: int = None; n_micro: int = None

def load(repo:pathlib.Path, name:str, extra:dict) -> dict:
    "Their module `name` executed with its package imports replaced by `extra`."
    src = subprocess.run(['git', '-C', str(repo), 'show', f'HEAD:{SCHED}/{name}'], capture_output=True, text=True, check=True).stdout
    src = '\n'.join(l for l in src.splitlines() if not l.startswith(('from megatron', 'import pulp')))
    ns = dict(extra); exec(compile(src, name, 'exec'), ns)
    return ns

def theirs_single(zb, D, N, f, b, w, c, mem, keep):
    cfg = GraphConfig([1.0] * D, [keep - 1.0] * D, [-keep] * D, [mem] * D, [f] * D, [b] * D, [w] * D, c, n_stages=D, n_micro=N)
    g, best = zb['Graph'].build_graph(D, N, cfg), None
    for flags in itertools.product((True, False), repeat=3):
        try: order, t, span = g.manual_order(*flags)
        except (ValueError, AssertionError): continue
        if best is None or span < best[1]: best = (order, span)
    if best is None: return None
    ids = lambda st: sorted(((k, m) for k in range(3) for m in range(N)), key=lambda x: best[0][g.get_id(x[0], st, x[1])])
    return [[Action('FBW'[k], st, m, 0) for k, m in ids(st)] for st in range(D)]

def theirs_v(zbv, D, N, f, b, w, c, mem, keep):
    g, best = zbv['PipelineGraph'](D, N, f, b, w, c, 1.0, keep - 1.0, -keep, max_mem=mem), None
    for fill_b, fill_f in itertools.product((True, False), repeat=2):
        try: sched, _, bubble = g.try_v_schedule(fill_f=fill_f, fill_b=fill_b)
        except AssertionError: continue
        if best is None or bubble < best[1]: best = (sched, bubble)
    if best is None: return None
    real = lambda cat, chunk: chunk if cat == 0 else 1 - chunk   # their B and W count chunks from the V's far end
    return [[Action('FBW'[cat], r if real(cat, ch) == 0 else 2 * D - 1 - r, m, 0) for cat, ch, m in best[0][r]] for r in range(D)]

def main(repo:str, out:str='bench/data/zb_reference.csv'):
    import torch
    zb = load(pathlib.Path(repo), 'zb.py', dict(torch=torch, GraphConfig=GraphConfig, ScheduledNode=None, FuncType=None))
    zbv = load(pathlib.Path(repo), 'zbv.py', dict(ScheduledNode=None, F='F', B='B', W='W', FuncType=None))
    rows = []
    for (name, (f, b, w, c)), (D, N), keep in itertools.product(PROFILES.items(), SETTINGS, (1.0, 0.5)):
        for memory, placement in ((D, 'single'), (2 * D, 'single'), (D, 'v')):
            v = placement == 'v'
            p = _make_problem(placement, D, N, Costs(f * (2 if v else 1), b * (2 if v else 1), w * (2 if v else 1), p2p=c),
                              memory=float(memory), w_keeps=keep)
            o = (theirs_v(zbv, D, N, f, b, w, c, 2 * memory, keep) if v else theirs_single(zb, D, N, f, b, w, c, memory, keep))
            ok = o is not None and max(_peaks(o, p)) <= memory + 1e-9 and (wk := _walk(o, p)) is not None
            rows.append(dict(profile=name, D=D, N=N, F=f, B=b, W=w, p2p=c, w_keeps=keep, memory=memory, placement=placement,
                             scheduler='zb-v' if v else 'zb heuristic', makespan=wk[1] if ok else math.inf,
                             span=_value(wk[0], wk[1], o, dataclasses.replace(p, objective='span')) if ok else math.inf))
            print(rows[-1], flush=True)
    with open(out, 'w', newline='') as fh:
        wr = csv.DictWriter(fh, list(rows[0])); wr.writeheader(); wr.writerows(rows)

if __name__ == '__main__': main(*sys.argv[1:])
