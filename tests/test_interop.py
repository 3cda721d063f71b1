"""Interop with torch.distributed.pipelining, both ways, on real gloo processes against the single-process reference:
our schedules run on torch's `_PipelineScheduleRuntime`, and torch's schedules run on our `PipelineRuntime`."""
import pytest
import torch
from torch import nn
from chimera_nb.schedules import make_schedule
from chimera_nb.ir import Schedule
from chimera_nb.torch_order import to_torch, from_torch
from chimera_nb.launch import launch_local
from chimera_nb.runtime import PipelineRuntime
from chimera_nb.testing import mlp_stages, reference_step

N, WIDTH, DT = 4, 8, torch.float64


def _batch():
    g = torch.Generator().manual_seed(3)
    return [torch.randn(2, WIDTH, generator=g, dtype=DT) for _ in range(N)], [torch.randn(2, WIDTH, generator=g, dtype=DT) for _ in range(N)]


def _errors(model_stages, mine, xs, ys, loss, stage_grads):
    ref = mlp_stages(len(model_stages), WIDTH, dtype=DT, seed=1)
    rloss = reference_step(ref, xs, ys, nn.functional.mse_loss)
    err = max((stage_grads[st][i] - p.grad).norm().item() / p.grad.norm().item()
              for st in mine for i, p in enumerate(ref[st].parameters()))
    return (abs(loss - rloss) / abs(rloss) if loss is not None else 0.0), err


def _ours_on_torch(rank, world, name, opts):
    "Our schedule, converted, on torch's runtime."
    from torch.distributed.pipelining import PipelineStage
    from torch.distributed.pipelining.schedules import _PipelineScheduleRuntime
    s = make_schedule(name, world, N, **opts)
    mods = mlp_stages(s.num_stages, WIDTH, dtype=DT, seed=1)
    mine = s.stages_of(rank)
    stages = [PipelineStage(mods[st], st, s.num_stages, torch.device('cpu')) for st in mine]
    rt = _PipelineScheduleRuntime(stages, N, loss_fn=nn.functional.mse_loss)
    rt._prepare_schedule_with_comms(to_torch(s))
    xs, ys = _batch()
    losses = []
    kw = {}
    if 0 in mine: kw['x'] = torch.cat(xs)   # torch splits the batch into N micro-batches along dim 0
    if s.num_stages - 1 in mine: kw.update(target=torch.cat(ys), losses=losses)
    x = kw.pop('x', None)
    rt.step(x, **kw) if x is not None else rt.step(**kw)
    loss = torch.stack(losses).mean().item() if losses else None
    return _errors(mods, mine, xs, ys, loss, {st: [p.grad for p in mods[st].parameters()] for st in mine})


def _torch_on_ours(rank, world, cls_name, stages_per_rank):
    "torch's schedule's own order, read with torch_order.from_torch, on our runtime."
    import torch.distributed.pipelining.schedules as tps
    from torch.distributed.pipelining import PipelineStage
    S = world * stages_per_rank
    cls = getattr(tps, cls_name)
    probe = mlp_stages(S, WIDTH, dtype=DT, seed=1)
    if cls_name in ('ScheduleZBVZeroBubble', 'ScheduleDualPipeV'): mine = [rank, S - 1 - rank]   # V placement
    else: mine = [rank + k * world for k in range(stages_per_rank)]                            # looped placement
    torch_stages = [PipelineStage(probe[st], st, S, torch.device('cpu')) for st in mine]
    order = cls(torch_stages, N, loss_fn=nn.functional.mse_loss).pipeline_order
    s = from_torch(order, name=cls_name)
    mods = mlp_stages(S, WIDTH, dtype=DT, seed=1)
    rt = PipelineRuntime(s, mods, nn.functional.mse_loss)
    xs, ys = _batch()
    loss = rt.step(xs, ys)
    return _errors(mods, s.stages_of(rank), xs, ys, loss, {st: [p.grad for p in mods[st].parameters()] for st in s.stages_of(rank)}), s.to_text()


@pytest.mark.parametrize('name, opts', [('1f1b', {}), ('zb-h1', {}), ('interleaved-1f1b', dict(chunks=2)), ('dualpipev', {})])
def test_our_schedule_runs_on_torchs_runtime(name, opts):
    N_ = N if name != 'dualpipev' else N
    for loss_err, grad_err in launch_local(_ours_on_torch, 2, name, opts, timeout=120):
        assert loss_err < 1e-10 and grad_err < 1e-10, (name, loss_err, grad_err)


@pytest.mark.parametrize('cls_name, per_rank', [('ScheduleInterleaved1F1B', 2), ('ScheduleInterleavedZeroBubble', 2),
                                               ('ScheduleZBVZeroBubble', 2)])
def test_torchs_schedule_runs_on_our_runtime(cls_name, per_rank):
    res = launch_local(_torch_on_ours, 2, cls_name, per_rank, timeout=120)
    assert res[0][1] == res[1][1]   # both ranks read the same schedule
    for (loss_err, grad_err), _ in res:
        assert loss_err < 1e-10 and grad_err < 1e-10, (cls_name, loss_err, grad_err)
