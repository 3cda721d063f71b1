"""Multi-process tests of chimera_nb.runtime on gloo (CPU): every schedule against a single-process reference,
hybrid data parallelism, replica consistency, recompute, split backward, failures, launchers.

Each launch runs several schedule configurations in the same processes (forked, ~2-3 s a launch on 2 cores).
Run: .venv/bin/python -m pytest tests/test_runtime.py -q
"""
import dataclasses, os, re, signal, subprocess, sys, textwrap, time
from pathlib import Path
import pytest
import torch
from torch import nn
from chimera_nb.schedules import make_schedule, Action
from chimera_nb.simulate import Costs, simulate
from chimera_nb.runtime import PipelineRuntime, PipelineFailure
from chimera_nb.launch import launch_local, init_from_env
from chimera_nb.testing import check_against_reference, mlp_stages, emulate_schedule

F64, F32 = 1e-10, 1e-5

# (name, N, options): all at D=4 ranks
CONFIGS_D4 = [
    ('gpipe', 4, {}),
    ('1f1b', 8, {}),
    ('gems', 4, {}),
    ('chimera', 4, {}),
    ('chimera', 8, dict(concat='direct')),
    ('chimera', 8, dict(concat='doubling')),
    ('chimera', 8, dict(concat='halving')),
    ('chimera', 8, dict(pipes=4)),
    ('interleaved-1f1b', 4, dict(chunks=2)),
    ('zb-h1', 8, {}),
    ('dualpipev', 8, {}),
    ('1f1b', 4, dict(recompute=True)),   # recompute on a schedule that does not ask for it
    ('zb-h1', 4, dict(recompute=True)),  # recompute + split backward
]
CONFIGS_D2 = [('gpipe', 2, {}), ('1f1b', 4, {}), ('gems', 2, {}), ('chimera', 2, {}), ('chimera', 4, dict(concat='doubling')),
              ('chimera', 4, dict(concat='halving')), ('interleaved-1f1b', 2, dict(chunks=3)), ('zb-h1', 4, {}),
              ('dualpipev', 4, {})]
CONFIGS_HYBRID = [('1f1b', 4, {}), ('chimera', 4, {}), ('chimera', 4, dict(concat='halving')), ('dualpipev', 4, {}),
                  ('interleaved-1f1b', 2, {})]


def _run_configs(rank, world, configs, **kw):
    out = []
    for name, N, opts in configs:
        opts = dict(opts)
        rec = opts.pop('recompute', None)
        r = check_against_reference(rank, world, name, N, recompute=rec, **kw, **opts)
        r.pop('timeline')
        out.append(r)
    return out


def _label(name, N, opts): return f"{name} N={N} {opts}"


def _check(results, configs, dp_width, tol, world):
    D = world // dp_width
    for i, (name, N, opts) in enumerate(configs):
        per_rank = [res[i] for res in results]
        worst_loss = max(r['loss_err'] for r in per_rank)
        worst_grad = max(r['grad_err'] for r in per_rank)
        assert worst_loss < tol, f"{_label(name, N, opts)}: loss relative error {worst_loss:.3g}"
        assert worst_grad < tol, f"{_label(name, N, opts)}: gradient relative error {worst_grad:.3g}"
        # every replica of a stage (pipes x data-parallel replicas) holds bit-identical weights after the steps
        held = {}
        for rank, r in enumerate(per_rank):
            for st, ps in r['params'].items(): held.setdefault(st, []).append((rank, ps))
        for st, copies in held.items():
            r0, p0 = copies[0]
            for rk, pk in copies[1:]:
                assert all(torch.equal(a, b) for a, b in zip(p0, pk)), \
                    f"{_label(name, N, opts)}: stage {st} differs between ranks {r0} and {rk}"
        if dp_width > 1 or name in ('chimera', 'gems'):
            assert any(len(c) > 1 for c in held.values())


@pytest.mark.timeout(300)
def test_every_schedule_d4_float64_dropout():
    res = launch_local(_run_configs, 4, CONFIGS_D4, steps=3, dropout=0.1, dtype=torch.float64, timeout=280)
    _check(res, CONFIGS_D4, 1, F64, 4)


@pytest.mark.timeout(200)
def test_every_schedule_d2_float32():
    res = launch_local(_run_configs, 2, CONFIGS_D2, steps=3, dropout=0.1, dtype=torch.float32, timeout=180)
    _check(res, CONFIGS_D2, 1, F32, 2)


@pytest.mark.timeout(200)
def test_hybrid_data_parallel_w2_d2():
    res = launch_local(_run_configs, 4, CONFIGS_HYBRID, dp_width=2, steps=3, dropout=0.1, dtype=torch.float64, timeout=180)
    _check(res, CONFIGS_HYBRID, 2, F64, 4)


def _recompute_without_seed(rank, world):
    "seed=None: recompute must restore the RNG state so dropout masks match the run without recompute."
    grads = []
    for rec in (False, True):
        torch.manual_seed(7)
        s = dataclasses.replace(make_schedule('1f1b', 2, 4), recompute=rec)
        rt = PipelineRuntime(s, mlp_stages(2, 8, dropout=0.5, dtype=torch.float64), nn.functional.mse_loss)
        g = torch.Generator().manual_seed(1)
        xs = [torch.randn(3, 8, generator=g, dtype=torch.float64) for _ in range(4)]
        loss = rt.step(xs, xs)
        grads.append((loss, [p.grad.clone() for p in rt.parameters()]))
    return grads


def test_recompute_restores_rng_without_seed():
    for (l0, g0), (l1, g1) in launch_local(_recompute_without_seed, 2):
        assert l0 == l1
        assert all(torch.equal(a, b) for a, b in zip(g0, g1))


def _killed(rank, world, how, victim, action):
    def hook(rt, ins):
        if rt.rank == victim and getattr(ins, 'action', None) == action and type(ins).__name__ == 'Compute':
            if how == 'exit': os._exit(3)
            if how == 'kill': os.kill(os.getpid(), signal.SIGKILL)
            if how == 'raise': raise ValueError('injected fault')
            if how == 'hang': time.sleep(1000)
    s = make_schedule('chimera', 4, 8)
    rt = PipelineRuntime(s, mlp_stages(4, 8), nn.functional.mse_loss, on_instruction=hook, timeout=5)
    xs = [torch.randn(2, 8) for _ in range(8)]
    for _ in range(2): rt.step(xs, xs)


@pytest.mark.parametrize('how', ['kill', 'exit', 'raise', 'hang'])
def test_failure_is_reported_in_bounded_time(how):
    action = Action('B', 1, 1, 0)
    victim = make_schedule('chimera', 4, 8).rank_of(0, 1)
    t = time.monotonic()
    with pytest.raises(PipelineFailure) as e:
        # grace > the runtime timeout (5 s) + the 2 s it waits for reports, so survivors always get to report
        launch_local(_killed, 4, how, victim, action, timeout=90, grace=15)
    took = time.monotonic() - t
    msg = str(e.value)
    print(msg)
    assert took < 60, f"took {took:.1f}s"
    assert f"rank {victim}" in msg
    if how == 'raise': assert 'failed at action B1.d1' in msg and 'injected fault' in msg
    if how in ('kill', 'exit'): assert ('killed by signal SIGKILL' if how == 'kill' else 'exited with code 3') in msg
    if how == 'hang': assert 'timeout=5' in msg
    # the survivors name the failed rank too, not just the launcher
    survivors = [l for l in msg.splitlines()[1:] if not l.strip().startswith(f"rank {victim}:")]
    assert any(f"rank {victim}" in l and 'stopped at' in l for l in survivors), msg


def _mismatch(rank, world, kind):
    if kind == 'count': PipelineRuntime(make_schedule('1f1b', 2, 2), mlp_stages(3, 4), nn.functional.mse_loss)
    if kind == 'placement': PipelineRuntime(make_schedule('chimera', 2, 2), {rank: nn.Linear(4, 4)}, nn.functional.mse_loss)
    if kind == 'world': PipelineRuntime(make_schedule('1f1b', 4, 4), mlp_stages(4, 4), nn.functional.mse_loss)
    if kind == 'schedule':  # ranks disagree on the schedule: caught at the first exchange, not a hang
        PipelineRuntime(make_schedule('1f1b' if rank == 0 else 'gpipe', 2, 2), mlp_stages(2, 4), nn.functional.mse_loss)


@pytest.mark.parametrize('kind,text', [('count', '3 stage modules'), ('placement', 'places stages [0, 1]'),
                                       ('world', 'needs W×D = 4 processes'), ('schedule', 'different schedule')])
def test_mismatch_caught_before_communication(kind, text):
    with pytest.raises(PipelineFailure, match=re.escape(text)): launch_local(_mismatch, 2, kind, timeout=60)


def test_emulated_timeline_close_to_simulation():
    s = make_schedule('chimera', 4, 8)
    c = Costs(forward=0.01, backward=0.01)
    tl = launch_local(emulate_schedule, 4, s, c, steps=2)[0]
    assert tl.source == 'emulated' and len([e for e in tl.events if e.kind in 'FB']) == len(s)
    ratio = tl.compute_makespan / simulate(s, c).compute_makespan
    assert 0.98 < ratio < 1.3, ratio


def test_spawn_start_method():
    res = launch_local(check_against_reference, 2, 'chimera', 2, start_method='spawn', timeout=120)
    assert max(r['grad_err'] for r in res) < F64


TORCHRUN_SCRIPT = textwrap.dedent('''
    import torch
    from torch import nn
    from chimera_nb.launch import init_from_env
    from chimera_nb.runtime import PipelineRuntime
    from chimera_nb.testing import mlp_stages, reference_step
    from chimera_nb.schedules import make_schedule
    rank, world, local = init_from_env()
    s = make_schedule('chimera', world, 4)
    rt = PipelineRuntime(s, mlp_stages(world, 8, dtype=torch.float64), nn.functional.mse_loss)
    g = torch.Generator().manual_seed(0)
    xs = [torch.randn(2, 8, generator=g, dtype=torch.float64) for _ in range(4)]
    loss = rt.step(xs, xs)
    ref = reference_step(mlp_stages(world, 8, dtype=torch.float64), xs, xs, nn.functional.mse_loss)
    assert abs(loss - ref) < 1e-12 * abs(ref), (loss, ref)
    print(f"rank {rank} ok loss {loss:.6f}")
''')


def _free_port():
    import socket
    with socket.socket() as sk:
        sk.bind(('127.0.0.1', 0)); return sk.getsockname()[1]


@pytest.mark.timeout(120)
def test_torchrun_and_slurm_env(tmp_path):
    script = tmp_path / 'run.py'
    script.write_text(TORCHRUN_SCRIPT)
    torchrun = Path(sys.executable).parent / 'torchrun'
    out = subprocess.run([str(torchrun), '--nproc_per_node', '2', '--master_port', str(_free_port()), str(script)],
                         capture_output=True, text=True, timeout=110)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.count('ok loss') == 2
    # srun-style: SLURM variables (and the port, so parallel runs do not collide)
    procs, port = [], str(_free_port())
    for r in range(2):
        env = {k: v for k, v in os.environ.items() if k not in ('RANK', 'WORLD_SIZE', 'MASTER_ADDR', 'MASTER_PORT')}
        env.update(SLURM_PROCID=str(r), SLURM_NTASKS='2', SLURM_LOCALID=str(r), SLURM_JOB_NODELIST='localhost',
                   SLURM_JOB_ID='632', MASTER_PORT=port, OMP_NUM_THREADS='1')
        procs.append(subprocess.Popen([sys.executable, str(script)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    outs = [p.communicate(timeout=100) for p in procs]
    assert all(p.returncode == 0 for p in procs), [o[1][-2000:] for o in outs]
    assert sum(o[0].count('ok loss') for o in outs) == 2


def _broadcast(rank, world):
    "Every rank starts from different weights; the runtime broadcasts each stage's weights from its lowest replica."
    s = make_schedule('chimera', 4, 4)
    rt = PipelineRuntime(s, mlp_stages(4, 8, seed=100 + rank), nn.functional.mse_loss, dp_width=1)
    return {st: [p.detach().clone() for p in m.parameters()] for st, m in rt.stages.items()}


def test_initial_weights_broadcast_to_replicas():
    res = launch_local(_broadcast, 4)
    s = make_schedule('chimera', 4, 4)
    for st in range(4):
        lo, hi = s.replicas(st)
        assert all(torch.equal(a, b) for a, b in zip(res[lo][st], res[hi][st]))
        assert all(torch.equal(a, b) for a, b in zip(res[lo][st], mlp_stages(4, 8, seed=100 + lo)[st].parameters()))


def _traced(rank, world, name, N, opts):
    s = make_schedule(name, world, N, **opts)
    rt = PipelineRuntime(s, mlp_stages(s.num_stages, 8), nn.functional.mse_loss)
    xs = [torch.randn(2, 8) for _ in range(N)]
    rt.step(xs, xs)
    return rt.timeline


@pytest.mark.parametrize('name,N,opts', [('chimera', 4, {}), ('dualpipev', 8, {}), ('interleaved-1f1b', 4, {})])
def test_measured_timeline_follows_the_schedule(name, N, opts):
    tls = launch_local(_traced, 4, name, N, opts)
    s = make_schedule(name, 4, N, **opts)
    tl = tls[0]
    assert tl.source == 'measured' and tl.name == s.name and tl.num_ranks == 4
    for r in range(4):
        evs = tl.rank_events(r)
        assert [e.action for e in evs] == s.actions(r)  # every action, in the schedule's order
        assert all(e.start <= e.end <= n.start + 1e-6 for e, n in zip(evs, evs[1:] + [evs[-1]._replace(start=1e9)]))
    # dependencies hold in measured time (one node: aligned clocks)
    from chimera_nb.schedules import dependencies
    end = {e.action: e.end for e in tl.events if e.kind in 'FBW'}
    for e in tl.events:
        if e.kind in 'FBW':
            for d in dependencies(e.action, s.num_stages): assert end[d] <= e.start + 1e-4, (d, e)
    if s.num_pipes > 1: assert any(e.kind == 'AR' for e in tl.events)


CONFIGS_CHANNELS = [('1f1b', 4, {}), ('chimera', 8, dict(concat='doubling')), ('chimera', 8, dict(pipes=4)),
                    ('interleaved-1f1b', 4, {}), ('dualpipev', 8, {}), ('zb-h1', 4, {})]


def test_per_pair_channels_as_on_nccl():
    "The CUDA path's P2P layout (one process group per direction of each pair, FIFO, no tags needed) on gloo."
    res = launch_local(_run_configs, 4, CONFIGS_CHANNELS, steps=2, dropout=0.1, dtype=torch.float64,
                       runtime_kw=dict(channels=True, lookahead=3), timeout=200)
    _check(res, CONFIGS_CHANNELS, 1, F64, 4)
