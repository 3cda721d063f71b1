"""A large model that starts on a GPU (issue 45): a Llama saved by transformers itself (sharded safetensors, bf16) is read a
layer at a time straight onto the GPU and trained in bf16 from that folder — start-up time, the host's peak resident memory
(what the construction costs the node) and the GPU's peak, beside the model's own sizes.

One process, NCCL, D = 1 (a lent machine has one GPU; the per-rank drop by D is measured on CPU processes in
bench/bench_large_start.py). Run on a CUDA machine:  python bench/gpu_large_start.py [--out DIR] [--layers 28] [--steps 6]
(about 2 minutes on an H200 for the 3B shape; on a CPU, --layers 2 --hidden 256 checks the script in seconds).
"""
import argparse, json, os, resource, subprocess, sys, tempfile, time
from pathlib import Path
import psutil
import torch

GB = 1e9


def peak_rss() -> float: return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024   # Linux: KiB


def save(folder:Path, hidden:int, layers:int):
    "A Llama-3.2-3B-shaped model (GPT-2 BPE's vocabulary: the folder has no tokenizer of its own), saved in bf16 by transformers, in its own process."
    cfg = dict(model_type='llama', hidden_size=hidden, intermediate_size=hidden * 8 // 3 // 256 * 256 or 256, num_attention_heads=max(1, hidden // 128),
               num_key_value_heads=max(1, hidden // 512), num_hidden_layers=layers, vocab_size=50304, max_position_embeddings=4096)
    dev = 'cuda' if torch.cuda.is_available() else 'cpu'
    code = (f"import torch, transformers; torch.manual_seed(0)\nwith torch.device({dev!r}): m = transformers.AutoModelForCausalLM.from_config("
            f"transformers.AutoConfig.for_model(**{cfg!r}), dtype=torch.bfloat16)\nm.save_pretrained({str(folder)!r}, max_shard_size='2GB')")
    t0 = time.perf_counter(); subprocess.run([sys.executable, '-c', code], check=True)
    return time.perf_counter() - t0, sum(f.stat().st_size for f in folder.glob('*.safetensors'))


def main():
    a = argparse.ArgumentParser()
    a.add_argument('--out', default=os.environ.get('OUT', 'out/gpu-large-start')); a.add_argument('--hidden', type=int, default=3072)
    a.add_argument('--layers', type=int, default=28); a.add_argument('--data', default=None, help='a text file, one document per line (default: the Wikipedia slice)'); a.add_argument('--steps', type=int, default=6); a.add_argument('--seq-len', type=int, default=512)
    a = a.parse_args()
    out = Path(a.out); out.mkdir(parents=True, exist_ok=True)
    from chimera_nb.launch import init_from_env
    from chimera_nb.spec import PipelineSpec, TrainConfig
    from chimera_nb.tasks import prepare_data
    from chimera_nb.train import prepare_model, train
    from chimera_nb.runtime import pick_device
    with tempfile.TemporaryDirectory(dir=os.environ.get('TMPDIR', '/tmp')) as d:
        folder = Path(d) / 'llama'
        save_s, size = save(folder, a.hidden, a.layers)
        os.environ.update(MASTER_ADDR='127.0.0.1', MASTER_PORT='29533', RANK='0', WORLD_SIZE='1', LOCAL_RANK='0')
        init_from_env()
        cuda = torch.cuda.is_available()
        cfg = TrainConfig(PipelineSpec(model=str(folder), D=1, N=4, B=2, seq_len=a.seq_len, schedule='1f1b', dtype='bfloat16' if cuda else 'float32'),
                          steps=a.steps, lr=1e-4, progress=False, data=a.data, metrics=str(out / 'metrics.jsonl'), eval_batches=1)
        td = prepare_data(cfg)
        rss0 = psutil.Process().memory_info().rss
        t0 = time.perf_counter()
        pm = prepare_model(cfg, td, cfg.spec.make(), stages=[0], device=pick_device(None))
        if cuda: torch.cuda.synchronize()
        start_s, read = time.perf_counter() - t0, pm.layers.weights.bytes_read
        params = sum(p.numel() for p in pm.stages[0].parameters())
        host_after_load = peak_rss()
        del pm
        t1 = time.perf_counter(); res = train(cfg); train_s = time.perf_counter() - t1
        row = dict(device=torch.cuda.get_device_name(0) if cuda else 'cpu', params_B=params / 1e9, folder_GB=size / GB, save_s=save_s,
                   startup_s=start_s, read_GB=read / GB, fp32_weights_GB=4 * params / GB, host_rss_before_GB=rss0 / GB,
                   host_peak_after_load_GB=host_after_load / GB, host_peak_GB=peak_rss() / GB,
                   gpu_peak_GB=(torch.cuda.max_memory_allocated() / GB) if cuda else None, train_s=train_s,
                   losses=[round(l, 4) for _, l in res.losses], summary={k: v for k, v in res.summary.items() if k not in ('config', 'spec')})
    print(json.dumps(row, indent=1, default=str))
    (out / 'large_start.json').write_text(json.dumps(row, indent=1, default=str))


if __name__ == '__main__': main()
