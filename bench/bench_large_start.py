"""Large models that start (issue 45): each rank's peak resident memory, bytes read and start-up time, measured beside what
the rank's own stages hold — in one run on this machine.

1. `chimera-train --model gpt2-large --schedule 1f1b -D 4 -N 4 -B 1 --seq-len 16 --steps 1 --local-ranks 4` (the run the issue
   measured: before, each rank peaked at 6.4-6.6 GB and rank 0 was killed); each rank's peak RSS sampled every 50 ms (psutil)
   beside its stage's training state (weights, gradients, AdamW's two moments: 16 bytes a parameter in fp32).
2. A 1B-class Llama saved by transformers itself as sharded safetensors (`save_pretrained(max_shard_size='500MB')`), trained
   from that folder at D = 4 the same way.
3. Start-up of that model: `prepare_model` of one rank's stages against the whole model (what every rank did before), from
   the folder (read) and from the seed (initialised); bytes read per rank against its share of the folder.

Run: .venv/bin/python bench/bench_large_start.py [--skip-1b]   (about 6 minutes on 2 cores, 24 GB; prints markdown tables)
"""
import argparse, json, os, subprocess, sys, tempfile, threading, time
from pathlib import Path
import psutil
import torch

GB = 1e9
LLAMA_1B = dict(model_type='llama', hidden_size=2048, intermediate_size=5632, num_attention_heads=32, num_key_value_heads=4,
                num_hidden_layers=18, vocab_size=50304, max_position_embeddings=2048, tie_word_embeddings=False)   # GPT-2 BPE's vocabulary


def peaks_of(cmd:list, timeout:float=1800) -> tuple:
    "(exit code, {child pid: peak RSS bytes} in start order, wall seconds, output tail) of `cmd`, its ranks sampled every 50 ms."
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    peaks, order, done = {}, [], threading.Event()
    def sample():
        me = psutil.Process(p.pid)
        while not done.is_set():
            try:
                for c in me.children(recursive=True):
                    try: r = c.memory_info().rss
                    except psutil.Error: continue
                    if c.pid not in peaks: order.append(c.pid)
                    peaks[c.pid] = max(peaks.get(c.pid, 0), r)
            except psutil.Error: pass
            time.sleep(0.05)
    th = threading.Thread(target=sample, daemon=True); th.start()
    out, _ = p.communicate(timeout=timeout); done.set(); th.join()
    return p.returncode, {pid: peaks[pid] for pid in order}, time.perf_counter() - t0, out[-2000:]


def stage_states(model:str, D:int) -> list:
    "Each rank's stage (1F1B: one a rank) training state in bytes: 16 a parameter (fp32 weights, gradients, two AdamW moments)."
    from chimera_nb.models import build, to_stages
    pm = to_stages(build(model, device='meta'), D)
    return [16 * sum(p.numel() for p in st.parameters()) for st in pm.stages]


def predicted_host(model:str, preset:str, D:int) -> list:
    "Each rank's host peak by the memory model (`memory.host_memory`, a CPU run: the stages' training state on the host, no checkpoint), at the run's own cut."
    from chimera_nb.hardware import HARDWARE
    from chimera_nb.memory import host_memory
    from chimera_nb.models import build, to_stages
    from chimera_nb.profile import estimate_profile
    from chimera_nb.schedules import make_schedule
    b = to_stages(build(model, device='meta'), D).partition.boundaries   # the run balances the stages by parameters
    prof = estimate_profile(preset, HARDWARE['h100'], 1, 16, 'float32')   # shapes and activations; the hardware's times do not enter
    return [h.peak for h in host_memory(prof, make_schedule('1f1b', D, 4), gpu=False, checkpoint=False, boundaries=b)]


def run_case(name:str, model:str, D:int=4, preset:str|None=None) -> list:
    cmd = [sys.executable, '-m', 'chimera_nb.cli', 'train', '--model', model, '--schedule', '1f1b', '-D', str(D), '-N', '4', '-B', '1',
           '--seq-len', '16', '--steps', '1', '--local-ranks', str(D), '--no-progress']
    code, peaks, wall, out = peaks_of(cmd)
    ranks = [v for v in peaks.values() if v > 200e6][:D]   # the ranks (not the short-lived helpers a process may start)
    states, pred = stage_states(model, D), predicted_host(model, preset or model, D)
    rows = [dict(case=name, rank=r, peak_rss_GB=p / GB, state_GB=s / GB, over_GB=(p - s) / GB, ok=p <= s + 1.5 * GB,
                 predicted_GB=q / GB, error=f"{q / p - 1:+.1%}") for r, (p, s, q) in enumerate(zip(ranks, states, pred))]
    print(f"\n{name}: exit {code}, {wall:.0f} s" + ('' if code == 0 else f"\n{out}"), flush=True)
    return rows, code


def save_llama(folder:Path):
    "The 1B Llama made and saved by transformers itself, in a process of its own (its 4 GB are gone before the ranks start)."
    code = (f"import torch, transformers; torch.manual_seed(0); transformers.AutoModelForCausalLM.from_config("
            f"transformers.AutoConfig.for_model(**{LLAMA_1B!r})).save_pretrained({str(folder)!r}, max_shard_size='500MB')")
    subprocess.run([sys.executable, '-c', code], check=True)
    return sum(f.stat().st_size for f in folder.glob('*.safetensors'))


def startup(folder:str, D:int=4) -> list:
    "Seconds to make the model's layers real and bytes read: each rank's stages against the whole model, from the folder and from the seed."
    from chimera_nb.models import build, to_stages, materialize
    rows = []
    for src, model in (('folder (read)', folder), ('seed (initialised)', LLAMA_1B)):
        def made(which):
            m = build(model, 'clm', device='meta')
            t0 = time.perf_counter(); materialize(m, which); t = time.perf_counter() - t0
            return t, (m.weights.bytes_read if m.weights is not None else 0)
        b = to_stages(build(model, 'clm', device='meta'), D).partition.boundaries
        whole_t, whole_b = made(None)
        for rank in range(D):
            t, got = made(range(b[rank], b[rank + 1]))
            rows.append(dict(source=src, rank=rank, layers=f"{b[rank]}-{b[rank + 1] - 1}", seconds=t, whole_seconds=whole_t,
                             speedup=whole_t / t, read_GB=got / GB, whole_read_GB=whole_b / GB))
    return rows


def md_table(rows:list) -> str:
    "Rows of dicts as a markdown table (floats to two decimals)."
    cols = list(rows[0])
    cell = lambda v: f"{v:.2f}" if isinstance(v, float) else str(v)
    return '\n'.join(['| ' + ' | '.join(cols) + ' |', '|' + '---|' * len(cols)] + ['| ' + ' | '.join(cell(r[c]) for c in cols) + ' |' for r in rows])


def main():
    a = argparse.ArgumentParser(); a.add_argument('--skip-1b', action='store_true'); a = a.parse_args()
    rows, codes = [], {}
    r, codes['gpt2-large'] = run_case('gpt2-large, D=4, 1f1b', 'gpt2-large'); rows += r
    start = []
    if not a.skip_1b:
        with tempfile.TemporaryDirectory() as d:
            folder = Path(d) / 'llama-1b'
            size = save_llama(folder)
            print(f"saved a {size / GB:.2f} GB Llama ({len(list(folder.glob('*.safetensors')))} shards)", flush=True)
            from chimera_nb.catalog import PRESETS, Preset
            PRESETS['bench-llama-1b'] = Preset('llama', {k: v for k, v in LLAMA_1B.items()}, 2048)   # its shapes, for the memory model's estimate
            r, codes['llama-1b'] = run_case('llama-1b (saved, sharded), D=4, 1f1b', str(folder), preset='bench-llama-1b'); rows += r
            start = startup(str(folder))
    print(json.dumps(dict(codes=codes, rows=rows, startup=start), default=str))
    print('\n' + md_table(rows))
    if start: print('\n' + md_table(start))


if __name__ == '__main__': main()
