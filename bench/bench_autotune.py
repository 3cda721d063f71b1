"""How fast the autotuner searches: configurations per second on a first search (every schedule shape new: generated,
timed by its dependencies, memory estimated), again with the shapes cached (another device preset), and again with the
predictions cached (another memory limit). Each search runs in a fresh process, so "first" really starts cold; pandas and
chimera_nb are imported before the clock starts (a notebook has them already). Target (issue 13): >= 500 configurations/s.

Run: .venv/bin/python bench/bench_autotune.py [--baseline DIR] [--repeat 2]     (about 2 minutes alone, 5 with a baseline)
With --baseline, each search also runs on the chimera_nb of another checkout DIR (e.g. `git worktree add /tmp/old REV`),
side by side, and the table gives the speed-up of this one.
"""
import argparse, json, os, subprocess, sys
from pathlib import Path

SEARCHES = [  # (what, P, G, model, micro-batch sizes, depths, schedules)
    ('the notebook search (09_autotune)', 32, 512, 'bert-48', [4, 8, 16], [1, 2, 4, 8], None),
    ('Bert-48, 16 nodes (paper scale)', 16, 256, 'bert-48', [2, 4, 8, 16], [2, 4, 8, 16], ['gpipe', '1f1b', 'gems', 'chimera']),
    ('Bert-48, 64 nodes (paper scale)', 64, 1024, 'bert-48', [2, 4, 8, 16], [2, 4, 8, 16, 32, 64], ['gpipe', '1f1b', 'gems', 'chimera']),
    ('GPT-2 64, 512 nodes (paper scale)', 512, 512, 'gpt2-64', [1, 2, 4], [2, 4, 8, 16, 32, 64], ['gpipe', '1f1b', 'gems', 'chimera']),
    ('every schedule, 16 GPUs, GPT-2 64', 16, 64, 'gpt2-64', [1, 2, 4], None, None),
]

CHILD = r"""
import json, sys
import pandas
from chimera_nb.autotune import autotune
from chimera_nb.hardware import HARDWARE
from chimera_nb.schedules import SCHEDULES
P, G, model, Bs, Ds, scheds = json.loads(sys.argv[1])
kw = dict(micro_batch_sizes=Bs, depths=Ds, schedules=scheds or list(SCHEDULES))
first = autotune(P, G, model=model, hardware=HARDWARE['p100-daint'], **kw)
shapes = autotune(P, G, model=model, hardware=HARDWARE['b200'], **kw)
preds = autotune(P, G, model=model, hardware=HARDWARE['p100-daint'], memory_limit=8 * 2**30, **kw)
import chimera_nb
print(json.dumps(dict(module=chimera_nb.__file__, n=first.evaluated, first=first.rate, first_s=first.seconds, shapes=shapes.rate, preds=preds.rate,
                      best=f"{first.ranking.iloc[0]['label']} W={first.best.W} D={first.best.D} B={first.best.B} N={first.best.N}")))
"""


def search(args, where):
    env = dict(os.environ, PYTHONPATH=str(where))
    # run in `where`: `python -c` puts the working folder first on sys.path, before PYTHONPATH
    out = subprocess.run([sys.executable, '-c', CHILD, json.dumps(args)], capture_output=True, text=True, timeout=600, env=env, cwd=where)
    if out.returncode: raise RuntimeError(f"search {args} in {where}: {out.stderr[-2000:]}")
    r = json.loads(out.stdout.strip().splitlines()[-1])
    if Path(r['module']).resolve().parent.parent != Path(where).resolve(): raise RuntimeError(f"imported {r['module']}, not from {where}")
    return r


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('--baseline', help='a checkout of another chimera_nb version to compare with')
    ap.add_argument('--repeat', type=int, default=2, help='runs of each search (the fastest counts)')
    a = ap.parse_args()
    here = Path(__file__).resolve().parent.parent
    base = "| baseline first search (configs/s) | speed-up " if a.baseline else ""
    print(f"| search | configurations | first search (configs/s) | seconds {base}| shapes cached (configs/s) | predictions cached (configs/s) | first choice |")
    print("|---|---|---|---|" + ("---|---|" if a.baseline else "") + "---|---|---|")
    for what, P, G, model, Bs, Ds, scheds in SEARCHES:
        args = [P, G, model, Bs, Ds, scheds]
        # alternate the two versions and keep each one's fastest of `--repeat` runs: the host's speed drifts
        runs = [(search(args, here), search(args, a.baseline) if a.baseline else None) for _ in range(a.repeat)]
        r = max((x for x, _ in runs), key=lambda x: x['first'])
        cmp = ""
        if a.baseline:
            b = max((y for _, y in runs), key=lambda y: y['first'])
            if b['n'] != r['n'] or b['best'] != r['best']: print(f"  note: the baseline searched {b['n']} configurations, first choice {b['best']}")
            cmp = f"| {b['first']:.0f} | {r['first'] / b['first']:.1f}x "
        print(f"| {what} | {r['n']} | {r['first']:.0f} | {r['first_s']:.2f} {cmp}| {r['shapes']:.0f} | {r['preds']:.0f} | {r['best']} |", flush=True)


if __name__ == '__main__':
    main()
