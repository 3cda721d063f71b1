"""NCCL's point-to-point rules held on CPU (`comm.NcclRulesComm`, threads): a send completes only when its receive is
posted, the k-th send of a direction meets the k-th receive whatever the tag, and a rank's operations on one NCCL
stream run in issue order. Every schedule, every Chimera concatenation and a searched order run on it, in the order the
runtime issues on NCCL (per-direction channels, receives posted ahead in the sender's order, sends waited at the end of
the step), exact against one process; the plain layout (one stream per pair of ranks) is shown to deadlock Chimera."""
import functools
import pytest
import torch
from torch import nn
from chimera_nb.comm import run_threads, NcclRulesComm
from chimera_nb.failures import PipelineFailure
from chimera_nb.testing import check_against_reference, mlp_stages, reference_step
from chimera_nb.runtime import PipelineRuntime
from chimera_nb.schedules import SCHEDULES

CASES = [(name, 4, 8, {}) for name in SCHEDULES] + [('chimera', 4, 8, dict(concat=c)) for c in ('doubling', 'halving', 'zero-bubble')] \
      + [('chimera', 4, 4, dict(pipes=4)), ('interleaved-1f1b', 2, 4, dict(chunks=3))]


@pytest.mark.parametrize('name,D,N,opts', CASES, ids=[f"{n}-D{d}-N{m}-{'-'.join(f'{k}={v}' for k, v in o.items())}" for n, d, m, o in CASES])
def test_every_schedule_runs_under_nccl_rules(name, D, N, opts):
    res = run_threads(check_against_reference, D, name, N, steps=2, runtime_kw=dict(timeout=20), comm=NcclRulesComm, timeout=90, **opts)
    assert max(r['grad_err'] for r in res) < 1e-12 and max(r['loss_err'] for r in res) < 1e-12, res


def test_data_parallel_replicas_under_nccl_rules():
    res = run_threads(check_against_reference, 4, 'chimera', 4, dp_width=2, steps=2, runtime_kw=dict(timeout=20), comm=NcclRulesComm, timeout=90)
    assert max(r['grad_err'] for r in res) < 1e-12


def _searched_order_step(rank, world, schedule):
    "One step of a searched schedule against one process: (loss, reference loss, worst gradient error)."
    stages, ref = mlp_stages(schedule.num_stages, 8, dtype=torch.float64, seed=1), mlp_stages(schedule.num_stages, 8, dtype=torch.float64, seed=1)
    rt = PipelineRuntime(schedule, stages, nn.functional.mse_loss, seed=3, timeout=20)
    g = torch.Generator().manual_seed(0)
    xs = [torch.randn(4, 8, generator=g, dtype=torch.float64) for _ in range(schedule.microbatches)]
    loss, rloss = rt.step(xs, xs), reference_step(ref, xs, xs, nn.functional.mse_loss, seed=3)
    own = [p for st in sorted(rt.stages) for p in rt.stages[st].parameters()]
    theirs = [p for st in sorted(rt.stages) for p in ref[st].parameters()]
    return loss, rloss, max(((a.grad - b.grad).norm() / b.grad.norm()).item() for a, b in zip(own, theirs))


def test_a_searched_order_runs_under_nccl_rules():
    from chimera_nb.search import search_schedule
    s = search_schedule(4, 4, time_limit=5).schedule
    for loss, rloss, err in run_threads(_searched_order_step, 4, s, comm=NcclRulesComm, timeout=90):
        assert abs(loss - rloss) < 1e-12 * abs(rloss) and err < 1e-12


def test_one_stream_per_pair_deadlocks_chimera():
    "Why the runtime opens a channel per direction on NCCL: with one stream per pair, Chimera's two pipes wait on each other."
    with pytest.raises(PipelineFailure, match='nothing after'):
        run_threads(check_against_reference, 4, 'chimera', 4, runtime_kw=dict(timeout=3),
                    comm=functools.partial(NcclRulesComm, pair_streams=True), timeout=60)
