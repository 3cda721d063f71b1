"""Training throughput: tokens/s and samples/s of Chimera, 1F1B and GPipe (chimera_nb) and torch.distributed.pipelining's
Schedule1F1B on the same tiny BERT (masked-LM on the Wikipedia slice) and the same global batch.

1. Real compute, D = 2 ranks with one intra-op thread each (this machine has 2 cores): the runtimes step in turn inside
   the same processes, median of the steps after warm-up.
2. D = 4 with emulated compute replayed from a profile of that model's 4 stages (per-stage forward and backward times
   measured on this machine): what 4 ranks would do with one core each, which 2 cores cannot show for real.

Run: .venv/bin/python bench/bench_train.py       (prints markdown tables; results go in BENCHMARKS.md)
"""
import statistics, time
import torch
import torch.distributed as dist
from chimera_nb import data as D
from chimera_nb.launch import launch_local
from chimera_nb.models import build, to_stages
from chimera_nb.profile import profile_layers
from chimera_nb.runtime import PipelineRuntime
from chimera_nb.schedules import make_schedule
from chimera_nb.simulate import Costs, simulate
from chimera_nb.spec import TrainConfig
from chimera_nb.tasks import prepare_data, split_batch
from chimera_nb.spec import PipelineSpec

N, MBS, SEQ = 8, 8, 32   # micro-batches, micro-batch size, tokens: a global batch of 64 sequences, 2048 tokens


def _real(rank, world, td, steps, warmup):
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B
    x, y = split_batch(D.global_batch(td.train, 0, N * MBS, 0))
    ids = x['input_ids']
    steppers = {}
    pm = to_stages(build('bert-tiny', 'mlm', seed=1, attn_implementation='sdpa'), world)
    stage = PipelineStage(pm.stages[rank], rank, world, torch.device('cpu'))
    sched = Schedule1F1B(stage, N, loss_fn=pm.loss_fn)
    def torch_step():
        stage.submod.zero_grad(set_to_none=True)
        if rank == 0: sched.step(ids)
        else: sched.step(target=y, losses=[])
    steppers['torch.distributed.pipelining Schedule1F1B'] = torch_step
    for name in ('1f1b', 'gpipe', 'chimera'):
        s = make_schedule(name, world, N)
        m = to_stages(build('bert-tiny', 'mlm', seed=1, attn_implementation='sdpa'), world)
        rt = PipelineRuntime(s, m.stages, m.loss_fn, ties=m.ties, trace=False)
        steppers[f'chimera_nb {name}'] = (lambda rt: lambda: rt.step(ids, y))(rt)
    samples = {k: [] for k in steppers}
    for i in range(warmup + steps):
        for k, fn in steppers.items():  # in turn, so that background load hits all of them alike
            dist.barrier(); t = time.perf_counter(); fn(); dist.barrier()
            if i >= warmup: samples[k].append(time.perf_counter() - t)
    return {k: statistics.median(v) for k, v in samples.items()}


def _emulated(rank, world, costs, steps):
    out = {}
    for name in ('1f1b', 'gpipe', 'chimera'):
        rt = PipelineRuntime(make_schedule(name, world, N), None, emulate=costs, shapes=(MBS, SEQ, 64))
        spans = []
        for _ in range(steps):
            rt.step(); spans.append(rt.timeline.makespan)
        out[name] = statistics.median(spans[1:])
    return out


def _table(title, times, base):
    print(f"\n### {title}\n")
    print("| runtime | step (ms) | samples/s | tokens/s | vs " + base + " |")
    print("|---|---|---|---|---|")
    for k, t in times.items():
        print(f"| {k} | {t * 1e3:.1f} | {N * MBS / t:.0f} | {N * MBS * SEQ / t:.0f} | {times[base] / t:.3f}x |")


def main(steps=15, warmup=3):
    td = prepare_data(TrainConfig(PipelineSpec(model='bert-tiny', schedule='1f1b', D=1, seq_len=SEQ, N=N, B=MBS)))
    res = launch_local(_real, 2, td, steps, warmup, threads=1, timeout=900)
    times = {k: max(r[k] for r in res) for k in res[0]}
    _table(f"Real compute: bert-tiny masked-LM, D = 2 ranks x 1 thread, N = {N} micro-batches of {MBS} x {SEQ} tokens "
           f"(median of {steps} steps after {warmup})", times, 'torch.distributed.pipelining Schedule1F1B')
    pm = to_stages(build('bert-tiny', 'mlm', seed=1), 4)
    x, y = split_batch(D.global_batch(td.train, 0, MBS, 0))
    torch.set_num_threads(1)
    prof = profile_layers(pm.stages, x['input_ids'], pm.loss_fn, y, repeats=5)
    costs = Costs([p.forward_s for p in prof], [p.backward_s for p in prof])
    emu = launch_local(_emulated, 4, costs, 6, timeout=600)[0]
    pred = {k: simulate(make_schedule(k, 4, N), costs).makespan for k in emu}
    print(f"\nper-stage forward ms {[round(p.forward_s * 1e3, 2) for p in prof]}, backward ms {[round(p.backward_s * 1e3, 2) for p in prof]}")
    _table("Emulated compute replayed from that profile, D = 4 (one core per rank, as a cluster would give)",
           {f'chimera_nb {k}': v for k, v in emu.items()}, 'chimera_nb 1f1b')
    print("\n| schedule | emulated step (ms) | simulated (ms) | emulated / simulated |\n|---|---|---|---|")
    for k in emu: print(f"| {k} | {emu[k] * 1e3:.1f} | {pred[k] * 1e3:.1f} | {emu[k] / pred[k]:.3f} |")


if __name__ == '__main__':
    main()
