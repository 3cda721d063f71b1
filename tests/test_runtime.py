"""Multi-process tests of chimera_nb.runtime on gloo (CPU): every schedule against a single-process reference,
hybrid data parallelism, replica consistency, recompute, split backward, failures, launchers.

Each launch runs several schedule configurations in the same processes (forked, ~2-3 s a launch on 2 cores).
Run: .venv/bin/python -m pytest tests/test_runtime.py -q
"""
import dataclasses, math, os, re, signal, subprocess, sys, textwrap, time
from pathlib import Path
import pytest
import torch
from tiers import within   # wall-clock bounds: judged in the timing tier only
from torch import nn
from chimera_nb.schedules import make_schedule
from chimera_nb.ir import Action
from chimera_nb.simulate import Costs, simulate
from chimera_nb.runtime import PipelineRuntime
from chimera_nb.failures import PipelineFailure
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


@pytest.mark.timed
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
    assert 'after the 90' not in msg, msg   # the failure stopped the run, not launch_local's own timeout
    within(took, 60, f'reporting a rank that failed by {how}')
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
    assert all(e.end - e.start >= 0.0095 for e in tl.events if e.kind in 'FB')  # every action slept its modelled time
    # timing bound loose enough for a loaded 2-core machine (speed is bench_runtime's job); a serialised run would be ~3x
    ratio = tl.compute_makespan / simulate(s, c).compute_makespan
    assert 0.98 < ratio < 2.0, ratio


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
    from chimera_nb.ir import dependencies
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


# ---------------------------------------------------------------- payloads of several tensors, optimizers, clipping
from chimera_nb.comm import run_threads
from chimera_nb.failures import NonFiniteLossError
from chimera_nb.program import Send, Recv, Compute, ReduceStart, ReduceWait, OptimizerStep, Msg

CONFIGS_MASKED = [('1f1b', 4, {}), ('chimera', 4, {}), ('chimera', 8, dict(concat='halving')), ('zb-h1', 4, {}),
                  ('dualpipev', 8, {}), ('interleaved-1f1b', 4, {}), ('chimera', 8, dict(concat='doubling'))]


@pytest.mark.timeout(300)
def test_masked_stages_varying_length_adamw_and_clipping_d4():
    "(h, mask) between stages, the sequence length changing every step, AdamW with weight decay, global clipping."
    res = launch_local(_run_configs, 4, CONFIGS_MASKED, steps=3, dropout=0.1, dtype=torch.float64, model='masked',
                       optimizer='adamw', max_norm=0.05, timeout=280)
    _check(res, CONFIGS_MASKED, 1, F64, 4)


def test_clipping_is_exact_on_hybrid_parallelism():
    configs = [('chimera', 4, {}), ('1f1b', 4, {})]
    res = launch_local(_run_configs, 4, configs, dp_width=2, steps=2, dtype=torch.float64, optimizer='adamw', max_norm=0.01)
    _check(res, configs, 2, F64, 4)


def _unequal(rank, world):
    "Micro-batches of different sizes and lengths in one step: the shapes travel in headers, the loss is exact."
    from chimera_nb.testing import masked_stages, masked_batch, reference_step
    s = make_schedule('chimera', world, 4)
    g = torch.Generator().manual_seed(0)
    pairs = [masked_batch(n, L, 8, torch.float64, g) for n, L in ((3, 5), (1, 2), (4, 7), (2, 5))]
    xs, ys = [p[0] for p in pairs], [p[1] for p in pairs]
    rt = PipelineRuntime(s, masked_stages(4, dtype=torch.float64, seed=2), nn.functional.mse_loss, seed=9)
    loss = rt.step(xs, ys)
    return loss, reference_step(masked_stages(4, dtype=torch.float64, seed=2), xs, ys, nn.functional.mse_loss, seed=9)


def test_unequal_micro_batches_in_one_step():
    for loss, ref in launch_local(_unequal, 4): assert abs(loss - ref) <= 1e-12 * abs(ref)


# ---------------------------------------------------------------- failures name the instruction
def _fail_at(rank, world, victim, target_repr, name, N):
    def hook(rt, ins):
        if rt.rank == victim and repr(ins) == target_repr: raise ValueError('injected fault')
    s = make_schedule(name, world, N)
    rt = PipelineRuntime(s, mlp_stages(s.num_stages, 4), nn.functional.mse_loss, on_instruction=hook, timeout=10)
    xs = [torch.randn(2, 4) for _ in range(N)]
    rt.step(xs, xs)


@pytest.mark.parametrize('name, N, victim, target, expect', [
    ('1f1b', 2, 1, 'F1.d0', 'rank 1 failed at action F1.d0: ValueError: injected fault'),
    ('1f1b', 2, 0, 'B0.d1', 'rank 0 failed at action B0.d1'),
    ('zb-h1', 2, 1, 'W1.d0', 'rank 1 failed at action W1.d0'),
    ('1f1b', 2, 0, 'send a1.d1 to 1', 'rank 0 failed at sending a1.d1 (the output of F0.d1) to rank 1'),
    ('1f1b', 2, 1, 'recv a1.d1 from 0', 'rank 1 failed at receiving the activation a1.d1 for F1.d1 from rank 0'),
    ('chimera', 2, 1, 'allreduce 0 start', 'rank 1 failed at the gradient all-reduce of stage 0 (starting it)'),
    ('chimera', 2, 0, 'allreduce 1 wait', 'rank 0 failed at the gradient all-reduce of stage 1 (waiting for it)'),
    ('1f1b', 2, 1, 'optimizer step', 'rank 1 failed at the end of the step'),
])
def test_failure_names_the_instruction(name, N, victim, target, expect):
    "One case per kind of instruction (in-process ranks: the message path is the same on every transport)."
    with pytest.raises(PipelineFailure) as e: run_threads(_fail_at, 2, victim, target, name, N, timeout=60)
    msg = str(e.value)
    assert expect in msg, msg
    other = 1 - victim
    assert f"rank {other} stopped at" in msg and f"rank {victim} failed" in msg.split(f"rank {other} stopped at")[1], msg


@pytest.mark.timed
def test_failure_at_the_last_instruction_is_bounded_on_gloo():
    "The victim fails at its last instruction while the others wait in the loss all-reduce: they stop, naming it."
    t = time.monotonic()
    with pytest.raises(PipelineFailure) as e: launch_local(_fail_at, 4, 2, 'optimizer step', 'chimera', 4, timeout=60, grace=15)
    msg = str(e.value)
    assert 'after the 60' not in msg, msg   # the failure stopped the run, not launch_local's own timeout
    within(time.monotonic() - t, 45, 'reporting a failure at the last instruction')
    assert 'rank 2 failed at the end of the step' in msg
    assert msg.count('summing the losses over every rank') >= 1, msg


def _poisoned(rank, world):
    def hook(rt, ins):
        if rt.rank == 1 and repr(ins) == 'B1.d0': raise ValueError('injected fault')
    s = make_schedule('1f1b', 2, 2)
    rt = PipelineRuntime(s, mlp_stages(2, 4), nn.functional.mse_loss, on_instruction=hook, timeout=10)
    xs = [torch.randn(2, 4) for _ in range(2)]
    out = []
    for attempt in (lambda: rt.step(xs, xs), lambda: rt.step(xs, xs),
                    lambda: PipelineRuntime(s, mlp_stages(2, 4), nn.functional.mse_loss)):
        t = time.monotonic()
        try: attempt(); out.append(('ok', 0.0))
        except PipelineFailure as e: out.append((str(e), time.monotonic() - t))
    return out


@pytest.mark.timed
def test_a_failed_step_poisons_the_group_and_says_so_at_once():
    for r, out in enumerate(launch_local(_poisoned, 2, timeout=60)):
        assert 'failed at action B1.d0' in out[0][0] or 'stopped at' in out[0][0]
        assert 'this runtime already failed' in out[1][0]                     # the same runtime: at once
        assert 'a step already failed in this process group' in out[2][0]     # a new one: at once
        within(out[1][1], 0.5, 'refusing a step on a failed runtime'); within(out[2][1], 0.5, 'refusing a new runtime in a failed group')
        assert 'restart the processes' in out[2][0]


def _nan(rank, world):
    s = make_schedule('chimera', world, 4)
    rt = PipelineRuntime(s, mlp_stages(4, 4, dtype=torch.float64), nn.functional.mse_loss)
    opt = torch.optim.SGD(list(rt.parameters()), lr=0.1)
    before = [p.detach().clone() for p in rt.parameters()]
    xs = [torch.randn(2, 4, dtype=torch.float64) for _ in range(4)]
    bad = [x.clone() for x in xs]; bad[3][0, 0] = float('nan')
    try: rt.step(bad, xs, optimizer=opt); msg = None
    except NonFiniteLossError as e: msg = str(e)
    unchanged = all(torch.equal(a, b) for a, b in zip(before, rt.parameters()))
    loss = rt.step(xs, xs, optimizer=opt)   # the runtime is not poisoned: the next step runs
    return msg, unchanged, loss


def test_nan_loss_refuses_the_optimizer_step_on_every_rank():
    for msg, unchanged, loss in launch_local(_nan, 4):
        assert msg is not None and 'global micro-batch 3 is nan' in msg and 'refused on every rank' in msg, msg
        assert unchanged and math.isfinite(loss)


# ---------------------------------------------------------------- bad input: clear errors before or at the first action
def _bad_input(rank, world, case):
    s = make_schedule('1f1b', 2, 4)
    kw = dict(lookahead=0) if case == 'lookahead' else dict(timeout=0) if case == 'timeout' else {}
    loss_fn = (lambda y, t: (y - t) ** 2) if case == 'loss' else nn.functional.mse_loss
    rt = PipelineRuntime(s, mlp_stages(2, 4), loss_fn, **kw)
    xs = [torch.randn(2, 4) for _ in range(4)]
    if case == 'inputs': rt.step(['a'] * 4, xs)
    if case == 'targets': rt.step(xs, xs[:3])
    if case == 'split': rt.step(torch.randn(10, 4), torch.randn(10, 4))
    rt.step(xs, xs)


@pytest.mark.parametrize('case, text', [
    ('inputs', 'a stage payload must be a tensor, or a tuple or dict of tensors; got str'),
    ('targets', 'targets: got 3 micro-batches, the schedule runs N=4'),
    ('split', 'a batch of 10 rows does not split into N=4 equal micro-batches'),
    ('loss', 'loss_fn must return a scalar (0-dim) tensor'),
    ('lookahead', 'lookahead must be >= 1, got 0'),
    ('timeout', 'timeout must be > 0, got 0'),
])
def test_bad_input_is_a_clear_error(case, text):
    with pytest.raises(PipelineFailure) as e: run_threads(_bad_input, 2, case, timeout=60)
    assert text in str(e.value), str(e.value)


def test_launchers_refuse_a_bad_world_size():
    for launch in (launch_local, run_threads):
        with pytest.raises(ValueError, match='world_size must be >= 1, got 0'): launch(_bad_input, 0, 'x')


# ---------------------------------------------------------------- nothing left running
LEAK_SCRIPT = textwrap.dedent('''
    import os, subprocess, sys, time
    from chimera_nb.launch import launch_local
    def fn(rank, world, d):
        child = subprocess.Popen(['sleep', '300'])        # something the rank starts
        with open(os.path.join(d, f'pids{rank}'), 'w') as f: f.write(f"{os.getpid()} {child.pid}")
        time.sleep(300)
    launch_local(fn, 2, sys.argv[1], timeout=250)
''')


def _alive(pid):
    try:
        with open(f'/proc/{pid}/stat') as f: return f.read().split(')')[-1].split()[0] != 'Z'
    except FileNotFoundError: return False


def _start_leaky(tmp_path):
    script = tmp_path / 'leak.py'; script.write_text(LEAK_SCRIPT)
    p = subprocess.Popen([sys.executable, str(script), str(tmp_path)])
    deadline = time.monotonic() + 60
    while len(list(tmp_path.glob('pids*'))) < 2 or any(not f.read_text() for f in tmp_path.glob('pids*')):
        assert time.monotonic() < deadline, 'ranks did not start'
        time.sleep(0.2)
    pids = [int(x) for f in tmp_path.glob('pids*') for x in f.read_text().split()]
    assert all(_alive(q) for q in pids)
    return p, pids


def _gone(pids, wait=30.0):
    "The pids still alive after up to `wait` seconds (it returns as soon as all are gone)."
    deadline = time.monotonic() + wait
    while any(_alive(q) for q in pids) and time.monotonic() < deadline: time.sleep(0.1)
    return [q for q in pids if _alive(q)]


@pytest.mark.parametrize('how', ['ctrl-c', 'launcher-killed'])
def test_ranks_and_their_children_die_with_the_launcher(tmp_path, how):
    p, pids = _start_leaky(tmp_path)
    p.send_signal(signal.SIGINT if how == 'ctrl-c' else signal.SIGKILL)
    p.wait(30)
    assert _gone(pids) == [], f"left running after {how}: {pids}"


def _rank_with_child_fails(rank, world, d):
    child = subprocess.Popen(['sleep', '300'])
    with open(os.path.join(d, f'child{rank}'), 'w') as f: f.write(str(child.pid))
    if rank == 1: raise ValueError('injected fault')
    time.sleep(300)


def test_a_failed_rank_takes_its_children_with_it(tmp_path):
    with pytest.raises(PipelineFailure, match='injected fault'):
        launch_local(_rank_with_child_fails, 2, str(tmp_path), timeout=60, grace=2)
    assert _gone([int(f.read_text()) for f in tmp_path.glob('child*')]) == []


# ---------------------------------------------------------------- the simulator predicts the emulated runtime
def _policies(rank, world, costs, steps):
    out = {}
    for sync in ('eager', 'eager-opt', 'end'):
        rt = PipelineRuntime(make_schedule('chimera', world, 4), None, emulate=costs, sync=sync, shapes=(4, 64))
        spans = []
        for _ in range(steps):
            rt.step(); spans.append(rt.timeline.makespan)
        out[sync] = sorted(spans[1:])[len(spans[1:]) // 2]
    return out


@pytest.mark.timeout(200)
def test_simulator_and_emulated_runtime_agree_on_the_sync_policies():
    costs = Costs(0.01, 0.02, allreduce=0.04)
    measured = launch_local(_policies, 4, costs, 5, timeout=180)[0]
    predicted = {p: simulate(make_schedule('chimera', 4, 4), costs, sync=p).makespan for p in measured}
    assert sorted(measured, key=measured.get) == sorted(predicted, key=predicted.get) == ['eager', 'eager-opt', 'end'], (measured, predicted)
    # the order is the claim; the bound is loose because late in the suite a 2-core machine runs this ~20% slow
    # (alone: 1.03-1.07 of the prediction; bench/bench_perf_model.py measures the error properly)
    for p in measured: assert 0.95 < measured[p] / predicted[p] < 1.5, (p, measured[p], predicted[p])
