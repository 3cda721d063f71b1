"""Training with compiled stages on one GPU, side by side (issue 36): a BERT-large masked-LM run in bf16, eager against
`--compile` (torch.compile per block) and `--compile reduce-overhead` (CUDA graphs), one rank and two ranks sharing the
GPU (threads, `run_threads`): step time, MFU against the GPU's peak, the first step (which pays the compile), losses.

    python bench/bench_gpu_train.py --data wiki.txt      # on a GPU (a text file, one document per line)
    python bench/bench_gpu_train.py --quick              # here, on a CPU: bert-tiny, float32 (no MFU: no peak known)

Each configuration runs `train_rank` exactly as chimera-train does (profile, metrics, summary); the numbers are the
summary's. A configuration that fails prints its one-line error and the table goes on."""
import argparse, json, math, sys, tempfile, time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from chimera_nb.spec import PipelineSpec, TrainConfig
from chimera_nb.train import train_rank, prepare_data
from chimera_nb.comm import run_threads


def run(model, dtype, D, mode, B, N, seq_len, steps, data, out:Path) -> dict:
    cfg = TrainConfig(PipelineSpec(model=model, dtype=dtype, D=D, B=B, N=N, schedule='1f1b', compile=mode, seq_len=seq_len),
                      steps=steps, data=data, lr=1e-4, warmup=1, progress=False, eval_batches=1, timeout=600.0,
                      metrics=str(out / f"{D}-{mode}.jsonl"))
    t = time.time()
    res = run_threads(train_rank, D, cfg, prepare_data(cfg), timeout=900)[0]
    s = res.summary
    return dict(D=D, compile=mode or 'eager', step_ms=1e3 * s['mean_step_s'], pipeline_ms=1e3 * s.get('measured_step_s', math.nan),
                mfu=s.get('mfu'), first_s=s['first_step_s'], wall_s=time.time() - t,
                losses=' '.join(f"{l:.3f}" for _, l in res.losses[-3:]))


def main():
    p = argparse.ArgumentParser()
    p.add_argument('--quick', action='store_true', help='bert-tiny in float32 on this CPU')
    p.add_argument('--data', default='wikipedia')
    p.add_argument('--budget', type=float, default=330.0, help='seconds: configurations that would start after it are skipped')
    p.add_argument('--json', default=None, help='append each row as JSON to this file')
    a = p.parse_args()
    model, dtype, B, N, L, steps = ('bert-tiny', 'float32', 4, 4, 32, 4) if a.quick else ('bert-large', 'bfloat16', 32, 4, 512, 6)
    plan = [(1, None), (1, 'default'), (1, 'reduce-overhead'), (2, None), (2, 'default')]
    if a.quick: plan = [(1, None), (1, 'default'), (2, None), (2, 'default')]
    rows, t0 = [], time.time()
    print(f"{model} {dtype}, B={B} x seq {L}, N={N}, 1F1B, {steps} steps per configuration", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        for D, mode in plan:
            if time.time() - t0 > a.budget: print(f"skipped D={D} {mode}: past the budget", flush=True); continue
            try: r = run(model, dtype, D, mode, B, N, L, steps, a.data, Path(tmp))
            except Exception as e: r = dict(D=D, compile=mode or 'eager', error=f"{type(e).__name__}: {str(e).splitlines()[0][:300]}")
            rows.append(r); print(json.dumps(r), flush=True)
            if a.json: open(a.json, 'a').write(json.dumps(r) + '\n')
    print('\n| D (ranks on one device) | stages | mean step (ms) | pipeline (ms) | MFU | first step (s) | last losses |\n|---|---|---|---|---|---|---|')
    for r in rows:
        if 'error' in r: print(f"| {r['D']} | {r['compile']} | failed: {r['error']} | | | | |"); continue
        mfu = f"{100 * r['mfu']:.1f}%" if r['mfu'] is not None else 'n/a'
        print(f"| {r['D']} | {r['compile']} | {r['step_ms']:.1f} | {r['pipeline_ms']:.1f} | {mfu} | {r['first_s']:.1f} | {r['losses']} |")
    print(f"total {time.time() - t0:.0f} s")


if __name__ == '__main__':
    main()
