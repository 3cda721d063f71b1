"""The optimizer state sharded over each stage's replicas (`PipelineSpec.zero = 1`, ZeRO-1): every schedule on real gloo
processes, float64 with dropout, AdamW and clipping over three steps, gives the single-process model's loss and weights
(Chimera direct, doubling and 4 pipes, 1F1B and GPipe with W = 2, the eager-sync policies, the gathers overlapped or not;
the stages without a tied copy reduce-scattered); each rank's optimizer keeps
its share; a run with zero resumes bit-identically and a checkpoint of another layout is refused in one line."""
import math
import pytest
import torch
from chimera_nb.checks import SpecError
from chimera_nb.launch import launch_local
from chimera_nb.models import build, to_stages
from chimera_nb.partition import Stage
from chimera_nb.runtime import PipelineRuntime
from chimera_nb.schedules import make_schedule
from chimera_nb.spec import PipelineSpec, TrainConfig
from chimera_nb.testing import reference_step
from chimera_nb.train import train
from chimera_nb.zero import ShardedOptimizer

TOL = 1e-11


def _batch(g, n=2, L=6):
    ids = torch.randint(0, 1024, (n, L), generator=g); am = torch.ones_like(ids); am[0, L - 1:] = 0
    labels = ids.clone(); labels[am == 0] = -100
    return dict(input_ids=ids, attention_mask=am), labels


def _exact(rank, world, schedule, N, W, sync, opts, overlap, scatter=True, steps=3):
    s = make_schedule(schedule, world // W, N, **opts)
    model = to_stages(build('gpt2-tiny', seed=4, dropout=0.1, attn_implementation='eager'), s.num_stages)
    for m in model.stages: m.double()
    ref_model, b = build('gpt2-tiny', seed=4, untie=False, dropout=0.1, attn_implementation='eager'), model.partition.boundaries
    ref = [Stage(ref_model.layers[x:y], x).double() for x, y in zip(b, b[1:])]
    rt = PipelineRuntime(s, model.stages, model.loss_fn, dp_width=W, seed=11, ties=model.ties, sync=sync)
    opt = ShardedOptimizer(rt, lambda ps: torch.optim.AdamW(ps, lr=1e-3, weight_decay=0.1), overlap=overlap, scatter=scatter)
    rparams = list({id(p): p for m in ref for p in m.parameters()}.values())
    ropt = torch.optim.AdamW(rparams, lr=1e-3, weight_decay=0.1)
    g, worst = torch.Generator().manual_seed(2), 0.0
    for t in range(steps):
        pairs = [_batch(g) for _ in range(N * W)]
        xs, ys = [p[0] for p in pairs], [p[1] for p in pairs]
        mine = slice(rt.dp_rank * N, (rt.dp_rank + 1) * N)
        loss = rt.step(xs[mine], ys[mine], optimizer=opt, max_norm=0.5)
        ropt.zero_grad(); rloss = reference_step(ref, xs, ys, model.loss_fn, seed=11, step=t)
        torch.nn.utils.clip_grad_norm_(rparams, 0.5); ropt.step()
        rt.grad_sync.settle(rt)   # with overlap, the gathers land before the next compute: read the weights after them
        w = max((p - q).abs().max().item() for st, m in rt.stages.items() for p, q in zip(m.parameters(), ref[st].parameters()))
        worst = max(worst, abs(loss - rloss) / rloss, w)
    kept = sum(v.numel() for st_ in opt.inner.state.values() for v in st_.values() if torch.is_tensor(v) and v.dim()) / 2
    full = sum(p.numel() for m in rt.stages.values() for p in m.parameters())
    reps = {st: len(rt.stage_groups[st][1]) for st in rt.stages}
    return worst, kept, full, reps


CASES = [('chimera', 8, 1, 'auto', dict(concat='direct'), False), ('chimera', 8, 1, 'eager', dict(concat='doubling'), True),
         ('chimera', 8, 1, 'eager-opt', dict(pipes=4), True), ('1f1b', 4, 2, 'end', {}, False), ('gpipe', 4, 2, 'eager', {}, True),
         ('chimera', 4, 2, 'auto', {}, False)]
CASES += [('chimera', 8, 1, 'eager', {}, True, False)]   # a CPU's default: the all-reduce kept, each replica slicing its share


@pytest.mark.timeout(400)
@pytest.mark.slow   # the default tier's form: Chimera at D = 4 in nbs/06h_zero.ipynb, and the resume below
@pytest.mark.parametrize('schedule, N, W, sync, opts, overlap, scatter', [c + (True,) * (7 - len(c)) for c in CASES])
def test_every_schedule_with_sharded_optimizer_state_is_exact(schedule, N, W, sync, opts, overlap, scatter):
    world = 4
    for worst, kept, full, reps in launch_local(_exact, world, schedule, N, W, sync, opts, overlap, scatter, timeout=300):
        assert worst < TOL, (schedule, opts, W, sync, worst)
        r = min(reps.values())
        assert kept <= math.ceil(full / r) + len(reps) * r, (kept, full, reps)   # a share of each stage, padding aside


def _losses(res): return [l for _, l in res.losses]


@pytest.mark.slow   # two training runs; the default tier keeps the notebook's exactness check
def test_a_sharded_run_resumes_bit_identically_and_refuses_another_layout(tmp_path):
    import shutil
    spec = PipelineSpec(model='bert-tiny', D=2, N=2, B=2, seq_len=16, schedule='chimera', zero=1)
    cfg = TrainConfig(spec, steps=4, checkpoint_every=2, checkpoint_dir=str(tmp_path / 'c'), local_ranks=2, progress=False, lr=1e-2)
    whole = train(cfg)
    shutil.rmtree(tmp_path / 'c' / 'step_00000004'); (tmp_path / 'c' / 'latest').unlink()   # as if stopped after step 2
    resumed = train(TrainConfig(**{**cfg.__dict__, 'resume': True}))
    assert _losses(resumed) == _losses(whole)[2:], (_losses(whole), _losses(resumed))   # bit for bit
    with pytest.raises(SpecError, match='zero differ'):   # the shards were cut for zero = 1: another layout is refused
        train(TrainConfig(**{**cfg.__dict__, 'spec': PipelineSpec(**{**spec.to_dict(), 'zero': None}), 'resume': True}))
