"""The one GPU check (needs CUDA; `--quick` runs the same code on a CPU with tiny sizes): one markdown table of

(a) tests   `tests/test_gpu.py`'s summary line (`bench/gpu_check.sh` runs pytest first and passes its log: --pytest-log);
(b) ranks   several pipeline ranks sharing one GPU as threads of this process (`run_threads`, `ThreadComm` carrying CUDA
            tensors; every rank's runtime on cuda:0): Chimera, 1F1B, ZB-H1, GPipe at D = 2 and 4 on an MLP (4 Linear(1024)
            + GELU + dropout per stage), bf16 autocast, SGD: the loss against the same training in one process on the same
            GPU under the same autocast (`tests/test_gpu.py::ranks_on_one_device`), the last step's compute span and bubble
            from the ranks' CUDA events, and the process' peak allocation against the memory model summed over the ranks;
            one float64 Chimera D = 4 row, exact;
(c) layers  one BERT-large encoder layer (h 1024, 16 heads, FFN 4096, sequence 512) and one GPT-2 block of GPT-2 large's /
            the paper's GPT-2 64's width (h 1280, 20 heads, sequence 1024), as the pipeline runs them
            (`models.BertBlock(BertLayer)`, `models.GPT2BlockLayer(GPT2Block)` from the transformers configs of the presets,
            SDPA attention, no padding mask so SDPA may pick flash attention, hidden dropout 0.1 (attention dropout 0 unless
            --attn-dropout: SDPA's own dropout RNG under CUDA graphs was not checked before), fp32 weights, bf16 autocast as the
            runtime): forward + backward (input and weight gradients) at B = 4, 8, 16, 32, eager against torch.compile
            (mode default) and CUDA graphs (torch.compile mode 'reduce-overhead'); each compiled once per model and mode
            with the batch dimension dynamic (torch._dynamo.maybe_mark_dynamic), then static at B = 16 while the time
            budget lasts (`--autotune` adds mode 'max-autotune-no-cudagraphs' at B = 16). MFU = model FLOPs / time / the
            GPU's dense BF16 peak (989 TFLOP/s for an H100 or H200 SXM: chimera_nb.hardware has no Hopper preset), model
            FLOPs of a step = 3 x the forward's matmul FLOPs = 3 (2 B S (4 h^2 + 2 h ffn) + 4 B S^2 h), profile.estimate_profile's
            count (24 B S h^2 + 4 B S^2 h for ffn = 4h; causal attention counted whole, as usual). Times: CUDA events,
            3 warm-up steps after the first call, median over 5 runs of 5 steps; 'first call' is the compile (forward and
            backward) plus one step, once per configuration;
(d) runtime the runtime's step against a plain loop over the same stages (MLP 8 x Linear(2048) in 2 stages, N = 16
            micro-batches of 512 rows, bf16), a world of one NCCL process, as before.

Rows print to stderr as they finish; the table prints at the end (also when stopped by `timeout`: SIGTERM).
Run (on a GPU node):  python bench/bench_gpu.py [--budget 270] [--pytest-log FILE] [--json FILE] [--autotune]
      here, on a CPU:  .venv/bin/python bench/bench_gpu.py --quick    (tiny sizes, eager + torch.compile on the CPU)
"""
import argparse, contextlib, gc, json, math, os, re, signal, socket, statistics, sys, time, traceback
from pathlib import Path
import torch
from torch import nn

ROOT = Path(__file__).resolve().parents[1]
for p in (str(ROOT / 'tests'), str(ROOT)):
    if p not in sys.path: sys.path.insert(0, p)

PEAKS = {'H100': 989e12, 'H200': 989e12, 'B200': 2.25e15}   # dense BF16 FLOP/s, NVIDIA data sheets (SXM)
COLUMNS = ('part', 'configuration', 'B', 'step (ms)', 'TFLOP/s', 'MFU', 'first call (s)', 'result')
ROWS, T0 = [], time.monotonic()
ARGS = None


def row(part, conf, B='', ms=None, tflops=None, mfu=None, first=None, result=''):
    "Add a row to the table (and show it on stderr now)."
    f = lambda v, spec: '' if v is None or (isinstance(v, float) and math.isnan(v)) else format(v, spec)
    r = dict(part=part, configuration=conf, B=str(B), ms=f(ms, '.2f'), tflops=f(tflops, '.0f'), mfu=f(mfu, '.1%'), first=f(first, '.1f'), result=result)
    ROWS.append(r)
    print(f"[{time.monotonic() - T0:6.0f} s] " + ' | '.join(r.values()), file=sys.stderr, flush=True)
    if ARGS is not None and ARGS.json:
        with open(ARGS.json, 'a') as fh: fh.write(json.dumps(r) + '\n')


def print_table():
    print(f"\n| {' | '.join(COLUMNS)} |\n|{'---|' * len(COLUMNS)}")
    for r in ROWS: print('| ' + ' | '.join(v.replace('|', '/') for v in r.values()) + ' |')
    sys.stdout.flush()


def left() -> float: return ARGS.budget - (time.monotonic() - T0)


def sync(dev):
    if dev.type == 'cuda': torch.cuda.synchronize(dev)


def attempt(part, conf, fn, *a, **kw):
    "Run one part; a failure becomes a row (the other parts still run)."
    try: return fn(*a, **kw)
    except Exception as e:
        traceback.print_exc()
        row(part, conf, result=f"FAILED: {type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}")


# ---- (a) the tests
def tests_row(log):
    text = Path(log).read_text(errors='replace') if log and Path(log).exists() else ''
    summary = [l.strip('= ') for l in text.splitlines() if re.search(r'\d+ (passed|failed|error)', l)]
    failed = [l for l in text.splitlines() if l.startswith(('FAILED', 'ERROR'))]
    row('tests', 'pytest tests/test_gpu.py', result=(summary[-1] if summary else 'no pytest summary in the log (timed out?)')
        + ('; ' + '; '.join(failed[:4]) if failed else ''))


# ---- (b) pipeline ranks as threads on one device
def ranks_part(dev, quick):
    from test_gpu import ranks_on_one_device
    MiB = 2 ** 20
    width, rows, layers = (32, 4, 2) if quick else (1024, 128, 4)
    configs = [(2, 'chimera', 4), (2, '1f1b', 4), (2, 'zb-h1', 4), (2, 'gpipe', 2),
               (4, 'chimera', 4), (4, '1f1b', 8), (4, 'zb-h1', 8), (4, 'gpipe', 4)]
    for D, name, N in configs:
        conf = f"{name} D={D} N={N}, {layers} x Linear({width}) per stage, {rows} rows, " + ('bf16 autocast' if dev.type == 'cuda' else 'fp32 (no autocast on a CPU)')
        def one():
            r = ranks_on_one_device(dev, D, name, N, dtype=torch.float32, autocast=True, width=width, rows=rows, layers=layers, steps=3)
            model = sum(x['model_total'] for x in r['ranks'])
            mem = (f"; process peak {r['process_peak'] / MiB:.1f} MiB vs memory model summed over ranks {model / MiB:.1f} MiB"
                   if r['process_peak'] is not None else f"; memory model summed over ranks {model / MiB:.2f} MiB")
            order = all(x['in_order'] and x['positive'] for x in r['ranks'])
            row('ranks on one device', conf, rows, r['step_ms'],
                result=f"losses {', '.join(f'{l:.5f}' for l in r['losses'])} vs one process {', '.join(f'{l:.5f}' for l in r['ref_losses'])}: "
                       f"loss err {r['loss_err']:.1e}, grad err {r['grad_err']:.1e}, weights err {r['param_err']:.1e}; "
                       f"{r['clock']} in order {order}, bubble {r['bubble']:.2f}{mem}")
        attempt('ranks on one device', conf, one)
    conf = f"chimera D=4 N=4 float64, dropout, 2 x Linear({max(16, width // 4)}) per stage"
    def exact():
        r = ranks_on_one_device(dev, 4, 'chimera', 4, dtype=torch.float64, width=max(16, width // 4), rows=rows, memory_model=False)
        ok = max(r['loss_err'], r['grad_err'], r['param_err']) < 1e-10
        row('ranks on one device', conf, rows, r['step_ms'], result=f"{'exact' if ok else 'NOT EXACT'}: loss err {r['loss_err']:.1e}, "
            f"grad err {r['grad_err']:.1e}, weights err {r['param_err']:.1e}")
    attempt('ranks on one device', conf, exact)


# ---- (c) one transformer layer: eager, torch.compile, CUDA graphs
def layer_models(quick):
    "{name: (make() -> stage module, seq, hidden, ffn)} built from the presets' transformers configs."
    from transformers import BertConfig, GPT2Config
    from transformers.models.bert.modeling_bert import BertLayer
    from transformers.models.gpt2.modeling_gpt2 import GPT2Block
    from chimera_nb.catalog import PRESETS
    from chimera_nb.models import BertBlock, GPT2BlockLayer
    if quick:
        bert, gpt = dict(hidden_size=128, num_attention_heads=2, intermediate_size=512), dict(n_embd=128, n_head=2)
        sb, sg, nb, ng = 32, 32, 'bert-tiny-like layer (h 128)', 'gpt2-tiny-like block (h 128)'
    else:
        bert, gpt = dict(PRESETS['bert-large'].config), dict(PRESETS['gpt2-large'].config)   # gpt2-large's block = gpt2-64's
        sb, sg, nb, ng = 512, 1024, 'BERT-large layer (h 1024, S 512)', 'GPT-2 large/64 block (h 1280, S 1024)'
    p = ARGS.attn_dropout if ARGS is not None else 0.0   # attention-probability dropout (hidden dropout stays the configs' 0.1)
    bc = BertConfig(**{k: v for k, v in bert.items() if k != 'num_hidden_layers'}, num_hidden_layers=1, attn_implementation='sdpa',
                    attention_probs_dropout_prob=p)
    gc_ = GPT2Config(**{k: v for k, v in gpt.items() if k != 'n_layer'}, n_layer=1, attn_implementation='sdpa', attn_pdrop=p)
    for c in (bc, gc_): c._attn_implementation = 'sdpa'
    ffn_g = gc_.n_inner or 4 * gc_.n_embd
    return {nb: (lambda: BertBlock(BertLayer(bc)), sb, bc.hidden_size, bc.intermediate_size),
            ng: (lambda: GPT2BlockLayer(GPT2Block(gc_, layer_idx=0)), sg, gc_.n_embd, ffn_g)}


def step_flops(B, S, h, ffn) -> float:
    "Model FLOPs of forward + backward: 3 x the forward's matmuls (estimate_profile's block count)."
    return 3 * (2 * B * S * (4 * h * h + 2 * h * ffn) + 4 * B * S * S * h)


def _timed(run, dev, reps, iters) -> float:
    "Median seconds per step over `reps` runs of `iters` steps (CUDA events on a GPU)."
    ts = []
    for _ in range(reps):
        if dev.type == 'cuda':
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            for _ in range(iters): run()
            b.record(); b.synchronize(); ts.append(a.elapsed_time(b) / 1e3 / iters)
        else:
            t = time.perf_counter()
            for _ in range(iters): run()
            ts.append((time.perf_counter() - t) / iters)
    return statistics.median(ts)


def _free(dev):
    gc.collect()
    if dev.type == 'cuda': torch.cuda.empty_cache()


def mode_label(mode) -> str:
    return {'eager': 'eager', 'default': 'torch.compile', 'reduce-overhead': 'torch.compile reduce-overhead (CUDA graphs)'}.get(mode, f'torch.compile {mode}')


def layer_config(name, spec, mode, Bs, dev, peak, shapes, quick):
    """Time one layer under `mode` ('eager' or a torch.compile mode) at each B; one compile for all B ('dynamic' batch)
    or one per B ('static'). A row per B; the first call (compile + a step) reported on the first row of a compile."""
    make, S, h, ffn = spec
    with torch.random.fork_rng(devices=[dev] if dev.type == 'cuda' else []):
        torch.manual_seed(0); layer = make().to(dev).train()
    params = [p for p in layer.parameters()]
    cuda = dev.type == 'cuda'
    amp = (lambda: torch.autocast('cuda', dtype=torch.bfloat16)) if cuda else contextlib.nullcontext
    graphs = mode == 'reduce-overhead'
    compiled = None
    for B in Bs:
        if mode != 'eager' and (compiled is None or shapes == 'static'):
            torch._dynamo.reset(); torch._dynamo.utils.counters.clear()
            compiled, fresh = torch.compile(layer, mode=None if mode == 'default' else mode, dynamic=False if shapes == 'static' else None), True
        else: fresh = False
        fn = layer if mode == 'eager' else compiled
        x = torch.randn(B, S, h, device=dev, requires_grad=True)
        if mode != 'eager' and shapes == 'dynamic': torch._dynamo.maybe_mark_dynamic(x, 0)
        gy = torch.randn(B, S, h, device=dev)
        def run():
            if graphs: torch.compiler.cudagraph_mark_step_begin()
            with amp(): y = fn(x, None)[0]
            y.backward(gy if y.dtype == gy.dtype else gy.to(y.dtype))
            x.grad = None
            for p in params: p.grad = None
        if cuda: torch.cuda.reset_peak_memory_stats(dev)
        sync(dev); t = time.perf_counter(); run(); sync(dev); first = time.perf_counter() - t
        for _ in range(1 if quick else 3): run()
        sec = _timed(run, dev, 2 if quick else 5, 2 if quick else 5)
        fl = step_flops(B, S, h, ffn)
        notes = []
        if cuda: notes.append(f"peak {torch.cuda.max_memory_allocated(dev) / 2**30:.2f} GiB")
        if mode != 'eager':
            c = torch._dynamo.utils.counters
            notes.append(f"graph breaks {sum(c['graph_break'].values())}")
            if graphs: notes.append(f"cudagraph skips {c['inductor']['cudagraph_skips']}")
            notes.append(f"{shapes} batch")
        conf = f"{name}, {mode_label(mode)}"
        row('layer fwd+bwd', conf, B, sec * 1e3, fl / sec / 1e12, fl / sec / peak, first if (fresh or mode == 'eager') else None,
            result=', '.join(notes) + ('' if fresh or mode == 'eager' else f"; first call at this B {first:.1f} s"))
        del x, gy
    del compiled, layer, params
    torch._dynamo.reset(); _free(dev)


def layers_part(dev, peak, quick):
    models = layer_models(quick)
    Bs = [2] if quick else [4, 8, 16, 32]
    mid = 2 if quick else 16
    for name, spec in models.items(): attempt('layer fwd+bwd', f"{name}, eager", layer_config, name, spec, 'eager', Bs, dev, peak, 'dynamic', quick)
    plan = [(n, 'default', 'dynamic', Bs) for n in models]
    if dev.type == 'cuda': plan += [(n, 'reduce-overhead', 'dynamic', Bs) for n in models]
    plan += [(n, 'default', 'static', [mid]) for n in models]
    if ARGS.autotune and dev.type == 'cuda': plan += [(n, 'max-autotune-no-cudagraphs', 'static', [mid]) for n in models]
    longest = 0.0
    for name, mode, shapes, bs in plan:
        need = max(30.0 if quick else 60.0, 1.5 * longest) + (10 if mode.startswith('max') else 0)
        conf = f"{name}, {mode_label(mode)}, {shapes} batch"
        if left() < need + ARGS.reserve:
            row('layer fwd+bwd', conf, ','.join(map(str, bs)), result=f"skipped: {left():.0f} s of the budget left, ~{need:.0f} s needed"); continue
        t = time.monotonic()
        attempt('layer fwd+bwd', conf, layer_config, name, models[name], mode, bs, dev, peak, shapes, quick)
        longest = max(longest, time.monotonic() - t)


# ---- (d) the runtime's overhead against a plain loop (a world of one NCCL process)
def _mlp(width=2048, layers=8, seed=0):
    torch.manual_seed(seed)
    blocks = [nn.Sequential(nn.Linear(width, width), nn.GELU()) for _ in range(layers)]
    return [nn.Sequential(*blocks[:layers // 2]), nn.Sequential(*blocks[layers // 2:])]


def _host_timed(fn, dev, steps, warmup):
    for _ in range(warmup): fn()
    sync(dev)
    out = []
    for _ in range(steps):
        t = time.perf_counter(); fn(); sync(dev); out.append(time.perf_counter() - t)
    return statistics.median(out)


def overhead_part(dev, quick):
    import torch.distributed as dist
    from chimera_nb.launch import init_from_env
    from chimera_nb.runtime import PipelineRuntime
    from chimera_nb.schedules import make_schedule
    N, rows, width, rounds = (4, 16, 64, 1) if quick else (16, 512, 2048, 3)
    if not dist.is_initialized():
        os.environ.setdefault('RANK', '0'); os.environ.setdefault('WORLD_SIZE', '1'); os.environ.setdefault('MASTER_ADDR', '127.0.0.1')
        with socket.socket() as sk:
            sk.bind(('127.0.0.1', 0)); os.environ.setdefault('MASTER_PORT', str(sk.getsockname()[1]))
        init_from_env('nccl' if dev.type == 'cuda' else 'gloo')
    xs = [torch.randn(rows, width, device=dev) for _ in range(N)]
    stages = [m.to(dev) for m in _mlp(width)]
    opt = torch.optim.SGD([p for m in stages for p in m.parameters()], lr=1e-4)
    amp = (lambda: torch.autocast('cuda', dtype=torch.bfloat16)) if dev.type == 'cuda' else contextlib.nullcontext

    def plain():
        opt.zero_grad(set_to_none=True)
        for x in xs:
            with amp(): loss = nn.functional.mse_loss(stages[1](stages[0](x)), x)
            (loss / N).backward()
        opt.step()

    runs = [('plain loop', plain)]
    for name, opts in (('1f1b', {}), ('zb-h1', {}), ('interleaved-1f1b', dict(chunks=2))):
        for trace in (False, True):
            s = make_schedule(name, 1, N, **opts)
            mods = _mlp(width) if s.num_stages == 2 else [nn.Sequential(*_mlp(width))]
            rt = PipelineRuntime(s, [m.to(dev) for m in mods], nn.functional.mse_loss, trace=trace, device=dev)
            ropt = torch.optim.SGD(list(rt.parameters()), lr=1e-4)
            runs.append((f"PipelineRuntime {name}" + ((' + CUDA-event trace' if dev.type == 'cuda' else ' + trace') if trace else ''), lambda rt=rt, ropt=ropt: rt.step(xs, xs, optimizer=ropt)))
    times = {what: [] for what, _ in runs}
    for _ in range(rounds):  # the variants take turns, so drift of the GPU clock hits all of them alike
        for what, fn in runs: times[what].append(_host_timed(fn, dev, 3 if quick else 10, 3 if quick else 2))
    base = statistics.median(times['plain loop'])
    for what, ts in times.items():
        t = statistics.median(ts)
        row('runtime vs plain loop', f"{what}: MLP 8 x Linear({width}) in 2 stages, N={N}, {'bf16' if dev.type == 'cuda' else 'fp32'}",
            rows, t * 1e3, result=f"{t / base:.3f} x the plain loop")


def main():
    global ARGS
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('--quick', action='store_true', help='tiny sizes (runs on a CPU): checks the script')
    ap.add_argument('--budget', type=float, default=270.0, help='seconds for the whole benchmark: compiled configurations are skipped past it')
    ap.add_argument('--reserve', type=float, default=None, help='seconds kept for the runtime part (default 25; 5 with --quick)')
    ap.add_argument('--pytest-log', default=None, help="pytest's log of tests/test_gpu.py, for the tests row")
    ap.add_argument('--json', default=None, help='also append each row as JSON to this file')
    ap.add_argument('--autotune', action='store_true', help="also mode 'max-autotune-no-cudagraphs' at B = 16 (slow to compile)")
    ap.add_argument('--attn-dropout', type=float, default=0.0, help="the layers' attention dropout (0: SDPA's dropout RNG is kept out of the CUDA graphs; the hidden dropout stays 0.1)")
    ap.add_argument('--parts', default='tests,ranks,layers,runtime', help='comma-separated: tests, ranks, layers, runtime')
    ARGS = ap.parse_args()
    if ARGS.reserve is None: ARGS.reserve = 5.0 if ARGS.quick else 25.0
    signal.signal(signal.SIGTERM, lambda *a: sys.exit(124))   # `timeout` stops us: the table still prints
    cuda = torch.cuda.is_available()
    if not cuda and not ARGS.quick: sys.exit("no CUDA device: run on a GPU node, or with --quick here")
    dev = torch.device('cuda:0') if cuda else torch.device('cpu')
    name = torch.cuda.get_device_name(dev) if cuda else 'cpu'
    peak = next((v for k, v in PEAKS.items() if k in name), float('nan'))
    import transformers
    print(f"### GPU check on {name} (torch {torch.__version__}, CUDA {torch.version.cuda}, transformers {transformers.__version__}, "
          f"Python {sys.version.split()[0]}); dense BF16 peak {peak / 1e12:.0f} TFLOP/s; budget {ARGS.budget:.0f} s"
          + (' (--quick: tiny sizes)' if ARGS.quick else ''), flush=True)
    parts = set(ARGS.parts.split(','))
    try:
        if 'tests' in parts and ARGS.pytest_log: tests_row(ARGS.pytest_log)
        if 'ranks' in parts: ranks_part(dev, ARGS.quick)
        if 'layers' in parts: layers_part(dev, peak, ARGS.quick)
        if 'runtime' in parts:
            if left() > (2.0 if ARGS.quick else 15.0): attempt('runtime vs plain loop', 'MLP, N micro-batches', overhead_part, dev, ARGS.quick)
            else: row('runtime vs plain loop', 'MLP', result=f"skipped: {left():.0f} s of the budget left")
    finally:
        row('total', 'bench_gpu.py', result=f"{time.monotonic() - T0:.0f} s")
        print_table()


if __name__ == '__main__':
    main()
