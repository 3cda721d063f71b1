"""The performance model on one GPU (needs CUDA): what a profile, the preset's formula and the memory model say, beside
what the GPU measures, in one run.

1. Achieved efficiency against micro-batch size. One BERT-large block (h = 1024, sequence 128) in bf16 autocast, profiled
   (partition.profile_layers, autocast as the runtime's) at B = 1 ... 64; its FLOP/s as a fraction of the device's
   dense BF16 peak, and perf_model.fit_efficiency's (efficiency, half_tokens) for it. The GPU presets (b200,
   rtx-pro-6000, l4) assume 40% and 2,048-4,096 tokens: this measures what a Hopper GPU reaches.
2. One GPU, every single-rank schedule (GPipe, 1F1B, ZB-H1, interleaved 1F1B with 2 chunks, DualPipeV; 1F1B with
   recompute): BERT-large masked-LM, bf16 autocast, AdamW, N micro-batches of B. Measured: the median step (5 after 3
   warm-up, CUDA-synchronised; the optimizer's update apart, as the model leaves it out) and the peak allocated memory over a step and its optimizer update
   (torch.cuda.max_memory_allocated). Predicted, uncalibrated: perf_model.predict (simulated) from
   (a) the layers profiled on this GPU at that B (measure.profile_layers_as, autocast) and (b) the preset formula
   (perf_model.estimate_profile) with part 1's fitted efficiency; memory from (a).

Run (on a GPU node):  python bench/bench_gpu_model.py            (about 1-2 min on an H100 / H200; prints markdown tables)
      here, on a CPU:  .venv/bin/python bench/bench_gpu_model.py --smoke   (bert-tiny, fp32: checks the script runs)
"""
import dataclasses, os, socket, statistics, sys, time
import torch
from chimera_nb.launch import init_from_env
from chimera_nb.profile import profile_layers_as
from chimera_nb.models import build
from chimera_nb.partition import Stage
from chimera_nb.profile import profile_layers
from chimera_nb.perf_model import predict
from chimera_nb.profile import estimate_profile
from chimera_nb.hardware import Hardware, fit_efficiency
from chimera_nb.runtime import PipelineRuntime
from chimera_nb.schedules import make_schedule

SMOKE = '--smoke' in sys.argv
MODEL, SEQ = ('bert-tiny', 32) if SMOKE else ('bert-large', 128)
PEAKS = {'H100': 989e12, 'H200': 989e12, 'B200': 2.25e15}   # dense BF16 FLOP/s, NVIDIA data sheets (H100 / H200 SXM)
RUNS = [('gpipe', {}), ('1f1b', {}), ('zb-h1', {}), ('interleaved-1f1b', dict(chunks=2)), ('dualpipev', {}), ('1f1b', dict(recompute=True))]   # recompute: Schedule.replaced
SPLITS = [(4, 16), (16, 8), (64, 2)] if not SMOKE else [(4, 4)]   # (B, N)
MiB = 2 ** 20


def _sync(dev):
    if dev.type == 'cuda': torch.cuda.synchronize(dev)


def _batch(vocab, n, seed=0):
    ids = torch.randint(0, vocab, (n, SEQ), generator=torch.Generator().manual_seed(seed))
    return ids, ids.clone()


def block_efficiency(m, dev, peak):
    "Part 1: (rows, efficiency, half_tokens, backward ratio) of one transformer block of `m` over micro-batch sizes."
    embed, block = m.layers[0], m.layers[1]
    h, ffn = m.config.hidden_size, m.config.intermediate_size
    rows, Bs = [], ([1, 2, 4, 8, 16, 32, 64] if not SMOKE else [1, 4])
    for B in Bs:
        ids, _ = _batch(m.config.vocab_size, B)
        with torch.no_grad(): x = embed(ids.to(dev))
        p = profile_layers([block], x, repeats=7, progress=False, autocast=dev.type == 'cuda')[0]
        flops = (2 * (4 * h * h + 2 * h * ffn) + 4 * SEQ * h) * B * SEQ   # estimate_profile's count for a block
        rows.append((B, B * SEQ, flops, p.forward_s, p.backward_s))
    eff, half = fit_efficiency([r[2] for r in rows], [r[1] for r in rows], [r[3] for r in rows], peak)
    ratio = statistics.median(r[4] / r[3] for r in rows if r[0] >= 8) if not SMOKE else rows[-1][4] / rows[-1][3]
    return rows, eff, half, ratio


def stages_for(s, prof, m):
    "The model's layers cut at the profile's time-balanced boundaries into `s`'s stages, and the ties between them."
    b = prof.boundaries(s.num_stages)
    stages = [Stage(m.layers[x:y], x) for x, y in zip(b, b[1:])]
    where = lambda i: next(k for k in range(len(b) - 1) if b[k] <= i < b[k + 1])
    ties = {key: [(where(i), f"layers.{i - b[where(i)]}.{n}") for i, n in places] for key, places in m.ties.items()}
    return stages, ties


def measure(m, s, B, N, dev, prof):
    """(median step s, median optimizer update s, peak allocated bytes over a step + update) of schedule `s` over the layers
    of `m` (on `dev`; every schedule trains the same layers in turn: their values do not change the time or the memory)."""
    stages, ties = stages_for(s, prof, m)
    rt = PipelineRuntime(s, stages, m.loss_fn, ties=ties, trace=False, autocast=dev.type == 'cuda')
    opt = torch.optim.AdamW(list(rt.parameters()), lr=1e-5)
    x, y = _batch(m.config.vocab_size, B * N, seed=1)
    xs, ys = list(x.to(dev).chunk(N)), list(y.to(dev).chunk(N))
    times, updates = [], []
    for i in range(8):
        if i == 3 and dev.type == 'cuda': torch.cuda.reset_peak_memory_stats(dev)
        _sync(dev); t = time.perf_counter()
        rt.step(xs, ys)
        _sync(dev); t1 = time.perf_counter()
        opt.step(); opt.zero_grad(set_to_none=True)
        _sync(dev); times.append(t1 - t); updates.append(time.perf_counter() - t1)
    peak = torch.cuda.max_memory_allocated(dev) - sum(t.numel() * t.element_size() for t in xs + ys) if dev.type == 'cuda' else float('nan')
    del rt, opt, stages
    if dev.type == 'cuda': torch.cuda.empty_cache()
    return statistics.median(times[3:]), statistics.median(updates[3:]), peak


def profile_at(m, B, dev):
    "The layers of `m` profiled on this device at micro-batch size B (bf16 autocast on a GPU, as the runs)."
    x, y = _batch(m.config.vocab_size, B)
    prof = profile_layers_as(MODEL, m.layers, x.to(dev), m.loss_fn, y.to(dev), B, SEQ, repeats=5, ties=m.ties, autocast=dev.type == 'cuda')
    if dev.type == 'cuda': torch.cuda.empty_cache()
    return prof


def main():
    os.environ.setdefault('RANK', '0'); os.environ.setdefault('WORLD_SIZE', '1'); os.environ.setdefault('MASTER_ADDR', '127.0.0.1')
    with socket.socket() as sk:
        sk.bind(('127.0.0.1', 0)); os.environ.setdefault('MASTER_PORT', str(sk.getsockname()[1]))
    init_from_env()
    dev = torch.device('cuda:0') if torch.cuda.is_available() else torch.device('cpu')
    name = torch.cuda.get_device_name(dev) if dev.type == 'cuda' else 'cpu'
    peak = next((v for k, v in PEAKS.items() if k in name), 1e12 if SMOKE else None)
    if peak is None: sys.exit(f"no dense BF16 peak known for {name!r}: add it to PEAKS")
    m = build(MODEL, 'mlm', seed=1, attn_implementation='sdpa')
    m.layers[:] = [l.to(dev) for l in m.layers]
    rows, eff, half, ratio = block_efficiency(m, dev, peak)
    print(f"\n### One BERT-large block, bf16 autocast, sequence {SEQ}, on {name} (torch {torch.__version__}); peak {peak / 1e12:.0f} TFLOP/s\n")
    print("| B | tokens | forward (ms) | backward (ms) | TFLOP/s (forward) | of peak | fitted curve | preset curve (40%, 4,096) |")
    print("|---|---|---|---|---|---|---|---|")
    for B, tok, fl, f, b in rows:
        print(f"| {B} | {tok} | {f * 1e3:.3f} | {b * 1e3:.3f} | {fl / f / 1e12:.0f} | {fl / f / peak:.1%} | "
              f"{eff * tok / (tok + half):.1%} | {0.40 * tok / (tok + 4096):.1%} |")
    print(f"\nfit_efficiency: efficiency {eff:.3f}, half_tokens {half:.0f}; backward / forward (B >= 8) {ratio:.2f}")
    hw = Hardware(f'{name} (fitted)', peak, torch.cuda.get_device_properties(dev).total_memory if dev.type == 'cuda' else 2 ** 34,
                  5e-6, 1e11, 5e-6, 1e-11, eff, half, 'bfloat16', assumed='efficiency and half_tokens fitted above',
                  source='bench_gpu_model.py part 1', backward_ratio=ratio)
    print(f"\n### {MODEL} masked-LM on one {name}: measured vs predicted (uncalibrated), AdamW, bf16 autocast\n")
    print("| schedule | B x N | AdamW update (ms) | measured step (ms) | predicted from the profile (ms) | error | from the preset formula (ms) | error "
          "| peak memory measured (MiB) | predicted (MiB) | error |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    errs = dict(t=[], f=[], m=[])
    for B, N in SPLITS:
        prof = profile_at(m, B, dev)
        est = estimate_profile(MODEL, hw, B, SEQ, 'bfloat16') if not SMOKE else None
        for sname, opts in RUNS:
            s = make_schedule(sname, 1, N, **{k: v for k, v in opts.items() if k != 'recompute'})
            if opts.get('recompute'): s = s.replaced(recompute=True)
            t, upd, mem = measure(m, s, B, N, dev, prof)
            p = predict(prof, s, 1, 'eager', 'simulate')
            pf = predict(est, s, 1, 'eager', 'simulate', memory=False).iteration_s if est else float('nan')
            errs['t'].append(abs(p.iteration_s / t - 1)); errs['f'].append(abs(pf / t - 1)); errs['m'].append(abs(p.memory_per_gpu / mem - 1))
            print(f"| {p.label}{' recompute' if p.recompute else ''} | {B} x {N} | {upd * 1e3:.1f} | {t * 1e3:.1f} | {p.iteration_s * 1e3:.1f} | {p.iteration_s / t - 1:+.0%} | {pf * 1e3:.1f} | "
                  f"{pf / t - 1:+.0%} | {mem / MiB:.0f} | {p.memory_per_gpu / MiB:.0f} | {p.memory_per_gpu / mem - 1:+.0%} |", flush=True)
    mean = lambda xs: statistics.fmean(xs) if xs else float('nan')
    print(f"\nmean absolute error: time from the profile {mean(errs['t']):.1%}, from the preset formula {mean(errs['f']):.1%}, "
          f"memory {mean(errs['m']):.1%}")


if __name__ == '__main__':
    main()
