"""Training end to end on real processes: schedules log the losses of plain training, the loss falls, kill-and-resume and
SIGTERM-and-resume continue the same trajectory, damaged checkpoints are refused, bad configurations fail before any
process starts, and the chimera-train command."""
import json, math, os, signal, subprocess, sys, time
from pathlib import Path
import pytest
from chimera_nb.checkpoint import RunComplete
import torch
from chimera_nb.train import train
from chimera_nb.spec import EXIT_REQUEUE
from chimera_nb.spec import TrainConfig
from chimera_nb.checkpoint import latest_checkpoint
from chimera_nb.failures import PipelineFailure
from chimera_nb import launch
from tiers import within   # wall-clock bounds: judged in the timing tier only


def TC(**kw) -> TrainConfig:
    "A run from flat keys (the spec's and training's, as a config file may hold them)."
    return TrainConfig.from_dict(kw)

BASE = dict(model='bert-tiny', dtype='float64', dropout=0.1, clip_grad=0.5, lr=3e-3, weight_decay=0.1, N=4,
            B=2, seed=3, progress=False, eval_batches=1)


def _losses(metrics):
    return [(r['step'], r['loss']) for r in map(json.loads, open(metrics)) if 'loss' in r and 'event' not in r]


@pytest.mark.timeout(400)
def test_every_schedule_logs_the_losses_of_plain_training(tmp_path):
    "Chimera, 1F1B and GPipe on 4 processes against --stages 1 (float64, dropout, clipping, AdamW): 5 equal losses."
    ref = train(TC(**BASE, schedule='1f1b', D=1, steps=5, local_ranks=1, metrics=str(tmp_path / 'ref.jsonl')))
    want = [l for _, l in ref.losses]
    for schedule in ('chimera', '1f1b', 'gpipe'):
        res = train(TC(**BASE, schedule=schedule, D=4, steps=5, local_ranks=4))
        got = [l for _, l in res.losses]
        assert len(got) == 5
        for a, b in zip(got, want): assert abs(a - b) <= 1e-9 * abs(b), (schedule, got, want)
    assert abs(res.eval['eval_loss'] - ref.eval['eval_loss']) <= 1e-9 * ref.eval['eval_loss']


@pytest.mark.timeout(300)
def test_loss_falls_on_wikipedia(tmp_path):
    "30 steps of masked-LM pre-training: from uniform guessing (ln 1024 = 6.93 nats) to well below it, held-out too."
    res = train(TC(model='bert-tiny', schedule='chimera', D=4, N=4, B=4, steps=30,
                            lr=1e-2, warmup=3, local_ranks=4, progress=False, metrics=str(tmp_path / 'm.jsonl')))
    losses = [l for _, l in res.losses]
    last = sum(losses[-5:]) / 5
    print(f"masked-LM loss: step 1 {losses[0]:.3f}, mean of the last 5 {last:.3f}, held-out {res.eval['eval_loss']:.3f}; "
          f"{res.summary['samples_per_s']:.1f} samples/s")
    assert losses[0] > math.log(1024) - 0.2 and last < losses[0] - 0.5 and res.eval['eval_loss'] < math.log(1024) - 0.5
    assert (tmp_path / 'm-timeline.html').exists() and (tmp_path / 'm-summary.json').exists()


def _kill_rank1_mid_step5(step, rt):
    if step == 5 and rt.rank == 1:
        count = [0]
        def hook(rt_, ins):
            count[0] += 1
            if count[0] == 4: os.kill(os.getpid(), signal.SIGKILL)
        rt.on_instruction = hook


def _sigterm_rank2_at_step3(step, rt):
    if step == 3 and rt.rank == 2: os.kill(os.getpid(), signal.SIGTERM)


@pytest.mark.timeout(400)
def test_kill_and_sigterm_resume_the_same_trajectory(tmp_path):
    cfg = dict(BASE, schedule='chimera', D=4, steps=8, local_ranks=4, checkpoint_every=2)
    whole = train(TC(**cfg, checkpoint_dir=str(tmp_path / 'whole')))
    want = dict(whole.losses)
    # SIGKILL in the middle of step 5: the run fails; resuming continues from the checkpoint of step 4
    ck = str(tmp_path / 'killed')
    with pytest.raises(PipelineFailure, match='killed by signal SIGKILL'):
        train(TC(**cfg, checkpoint_dir=ck), on_step=_kill_rank1_mid_step5)
    res = train(TC(**cfg, checkpoint_dir=ck, resume=True))
    assert [s for s, _ in res.losses] == [4, 5, 6, 7]
    for s, l in res.losses: assert abs(l - want[s]) <= 1e-12 * abs(want[s]), (s, l, want[s])
    # SIGTERM at step 3: every rank finishes the step, saves, and stops; resuming continues from step 4
    ck = str(tmp_path / 'term')
    stopped = train(TC(**{**cfg, 'checkpoint_every': 0}, checkpoint_dir=ck), on_step=_sigterm_rank2_at_step3)
    assert stopped.stopped and stopped.step == 4 and (Path(ck) / 'step_00000004' / 'manifest.json').exists()
    res = train(TC(**{**cfg, 'checkpoint_every': 0}, checkpoint_dir=ck, resume=True))
    assert [s for s, _ in res.losses] == [4, 5, 6, 7]
    for s, l in res.losses: assert abs(l - want[s]) <= 1e-12 * abs(want[s]), (s, l, want[s])
    # a checkpoint truncated on disk is refused, with the reason, and the previous one used
    c = TC(**cfg, checkpoint_dir=str(tmp_path / 'whole'))
    s = c.spec.make()
    newest = tmp_path / 'whole' / 'step_00000008' / 'rank00002.safetensors'
    newest.write_bytes(newest.read_bytes()[:1000])
    d, skipped = latest_checkpoint(c, 4, s.to_text())
    assert d.name == 'step_00000006' and 'rank00002.safetensors is damaged' in skipped[0]


@pytest.mark.parametrize('cfg, msg', [
    (dict(model='bert-huge'), 'unknown model'),
    (dict(schedule='pipedream'), 'choose one of'),
    (dict(D=8, N=8), 'has 6 layers'),
    (dict(D=4, local_ranks=3), 'local_ranks=3'),
    (dict(data='/no/such/corpus.txt'), 'does not exist'),
    (dict(B=100000), 'fewer than one global batch'),
    (dict(model='llama3-70b', seq_len=16), 'host memory: the 4 ranks of one node need'),   # 70B on this machine's free memory: refused at once
])
def test_bad_configurations_fail_before_any_process_starts(cfg, msg, monkeypatch):
    from chimera_nb import launch
    monkeypatch.setattr(launch, 'launch_local', lambda *a, **k: pytest.fail('ranks were started for a bad configuration'))
    with pytest.raises((ValueError, TypeError, FileNotFoundError), match=msg):
        train(TC(**{**dict(progress=False, local_ranks=4), **cfg}))


def _train_main(capsys, args) -> tuple:
    "chimera-train ARGS in this process: (exit code, stdout, stderr)."
    from chimera_nb.cli import train_main
    capsys.readouterr()
    try: code = train_main([str(a) for a in args])
    except SystemExit as e: code = e.code
    out = capsys.readouterr()
    return code or 0, out.out, out.err


def test_the_command(tmp_path, capsys):
    "chimera-train as a real process trains and exits 0 with its summary; resubmitted, the finished run says so; bad flags are one line, exit 2."
    exe = Path(sys.executable).parent / 'chimera-train'
    args = ['--stages', '2', '--microbatches', '2', '--steps', '3', '--local-ranks', '2', '--no-progress', '--balance', 'time',
            '--metrics', str(tmp_path / 'm.jsonl'), '--checkpoint-dir', str(tmp_path / 'ck')]
    out = subprocess.run([str(exe), *args], capture_output=True, text=True, timeout=200)
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout.splitlines()[-1])['steps'] == 3
    logged = (tmp_path / 'm.jsonl').read_text()
    code, stdout, stderr = _train_main(capsys, args + ['--resume'])   # the finished run, resubmitted
    assert code == 0 and 'is complete: step 3 of 3' in stderr and '--resume-anyway steps' in stderr, stderr[-2000:]   # the flag of the tool in use
    assert json.loads(stdout)['steps'] == 3   # its summary, not a run of no steps
    assert (tmp_path / 'm.jsonl').read_text() == logged   # nothing started: no empty run appended to its metrics
    code, _, stderr = _train_main(capsys, ['--partition', 'time'])   # SLURM's word, not balancing
    assert code == 2 and 'unrecognized arguments: --partition' in stderr
    code, _, stderr = _train_main(capsys, ['--stages', '3'])
    assert code == 2 and 'even number of stages' in stderr and stderr.count('\n') == 1   # one line



@pytest.mark.timed
def test_help_answers_without_importing_torch():
    "chimera-train --help, a real process: its text, no torch imported (the start-up a user waits for), within 5 s in the timing tier."
    exe = Path(sys.executable).parent / 'chimera-train'
    t = time.monotonic(); h = subprocess.run([str(exe), '--help'], capture_output=True, text=True, timeout=100)
    assert h.returncode == 0 and 'micro-batch size' in h.stdout
    within(time.monotonic() - t, 5, 'chimera-train --help')
    probe = 'import sys\nfrom chimera_nb.cli import train_main\ntry: train_main(["--help"])\nexcept SystemExit: pass\nprint("torch" in sys.modules)'
    r = subprocess.run([sys.executable, '-c', probe], capture_output=True, text=True, timeout=100)
    assert r.returncode == 0 and r.stdout.strip().endswith('False'), r.stdout[-500:] + r.stderr[-2000:]


@pytest.mark.timeout(400)
@pytest.mark.slow  # nbs/21_exp_bert runs the same fine-tuning (2 workers) in the suite; this is its 4-worker form
def test_pretrained_minilm_fine_tuned_on_reuters_with_chimera():
    "The real pretrained MiniLM BERT, fine-tuned on R8 with Chimera on 4 processes: well above the majority class."
    import numpy as np
    from chimera_nb import data as D
    test_labels = D.text_classification('reuters-r8').test.labels
    majority = np.bincount(test_labels).max() / len(test_labels)
    res = train(TC(model=str(D.minilm_path()), task='classify', data='reuters-r8', schedule='chimera', D=4,
                            N=4, B=4, steps=24, lr=2e-4, warmup=3, seq_len=64, eval_batches=8,
                            local_ranks=4, progress=False))
    print(f"R8 test accuracy {res.eval['accuracy']:.3f} (majority class {majority:.3f}) after 24 steps of 16 examples")
    assert res.eval['accuracy'] > majority + 0.15


# ---- hardening: checkpoints that cannot run code or resume another run, divergence, signals, one-line errors ----

SMALL = dict(model='bert-tiny', D=2, N=2, B=2, progress=False, eval_batches=1, local_ranks=2, lr=3e-3)


def _cli(*args, env=None, timeout=200):
    exe = Path(sys.executable).parent / 'chimera-train'
    return subprocess.run([str(exe), *map(str, args)], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})})


@pytest.mark.timeout(300)
def test_a_checkpoint_that_would_run_code_is_refused_and_nothing_runs(tmp_path):
    import pickle
    ck = tmp_path / 'ck'
    train(TC(**SMALL, steps=2, checkpoint_dir=str(ck)))
    d = ck / 'step_00000002'
    assert not list(d.glob('*.pt')) and (d / 'rank00000.safetensors').exists()   # tensors and JSON only
    sentinel = tmp_path / 'pwned'
    class Evil:
        def __reduce__(self): return (os.system, (f'touch {sentinel}',))
    evil = pickle.dumps({'stages': Evil()})
    (d / 'rank00000.safetensors').write_bytes(evil)
    m = json.loads((d / 'manifest.json').read_text())          # an attacker who can write the folder fixes the hashes too
    m['files']['rank00000.safetensors'] = dict(size=len(evil), sha256=__import__('hashlib').sha256(evil).hexdigest())
    (d / 'manifest.json').write_text(json.dumps(m))
    with pytest.raises(PipelineFailure, match='not a chimera_nb checkpoint'):
        train(TC(**SMALL, steps=3, checkpoint_dir=str(ck), resume=True, resume_anyway='steps'))
    assert not sentinel.exists()


@pytest.mark.timeout(300)
def test_resume_refuses_another_configuration_unless_named(tmp_path, capfd):
    ck = str(tmp_path / 'ck')
    train(TC(**SMALL, steps=2, checkpoint_dir=ck, metrics=str(tmp_path / 'm.jsonl')))
    with pytest.MonkeyPatch.context() as m, pytest.raises(ValueError, match=r"holds checkpoints of another run \(step 2\): lr, seed, steps differ"):
        m.setattr(launch, 'launch_local', lambda *a, **k: pytest.fail('ranks were started for a refused resume'))   # refused before
        train(TC(**{**SMALL, 'lr': 1e-4}, steps=4, seed=7, checkpoint_dir=ck, resume=True))
    res = train(TC(**{**SMALL, 'lr': 1e-4}, steps=4, seed=7, checkpoint_dir=ck, resume=True, resume_anyway='steps,lr,seed'))
    assert [s for s, _ in res.losses] == [2, 3] and 'resumed from step 2' in capfd.readouterr().out
    with pytest.raises(RunComplete, match='is complete: step 4 of 4'):   # nothing left to run: said, before any process starts
        train(TC(**{**SMALL, 'lr': 1e-4}, steps=4, seed=7, checkpoint_dir=ck, resume=True, metrics=str(tmp_path / 'm2.jsonl')))
    assert not (tmp_path / 'm2.jsonl').exists()
    for broken in ('[]', 'null', '{"format": 2}', '{"format": 2, "step": 4, "world": 2, "config": {}, "files": {"a": {}}}'):
        d = Path(ck) / 'step_00000009'; d.mkdir(exist_ok=True); (d / 'manifest.json').write_text(broken)
        from chimera_nb.checkpoint import latest_checkpoint
        best, skipped = latest_checkpoint(TC(**SMALL, checkpoint_dir=ck), 2, TC(**SMALL).spec.make().to_text())
        assert best.name == 'step_00000004' and 'manifest' in skipped[0], (broken, skipped)


@pytest.mark.timeout(200)
def test_a_diverging_run_stops_with_its_step_and_cause(tmp_path):
    r = _cli('-D', 2, '-N', 2, '--steps', 8, '--local-ranks', 2, '--lr', '1e30', '--no-progress', '--checkpoint-dir', tmp_path / 'ck',
             '--checkpoint-every', 1)
    assert r.returncode == 3, r.stderr[-2000:]
    last = r.stderr.strip().splitlines()[-1]
    assert '3 steps in a row had no finite update' in last and 'lower lr' in last and 'last good checkpoint is kept' in last, last
    kept = sorted(p.name for p in (tmp_path / 'ck').glob('step_*'))
    assert kept and kept[-1] < 'step_00000008'   # nothing after the divergence was saved over it


@pytest.mark.slow   # three 200-step runs: make test-all (the default tier: test_kill_and_sigterm_resume_the_same_trajectory)
@pytest.mark.timeout(300)
def test_sigterm_to_the_launcher_checkpoints_and_resumes_the_same_trajectory(tmp_path, capsys):
    "The signalled launcher is a real process; the uninterrupted and the resumed runs go through chimera-train's main here."
    # 200 steps of ~12 ms: the signal lands mid-run on any machine (at 8 steps a fast CI host finished first, exit 0)
    args = ['-D', 2, '-N', 2, '--steps', 200, '--local-ranks', 2, '--no-progress', '--lr', '3e-3', '--eval-batches', 1]
    code, _, err = _train_main(capsys, [*args, '--metrics', tmp_path / 'whole.jsonl'])
    assert code == 0, err[-2000:]
    exe = Path(sys.executable).parent / 'chimera-train'
    m = tmp_path / 'run.jsonl'
    p = subprocess.Popen([str(exe), *map(str, args), '--metrics', str(m), '--checkpoint-dir', str(tmp_path / 'ck')],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 150
    while time.monotonic() < deadline and not (m.exists() and len(_losses(m)) >= 2): time.sleep(0.05)
    p.send_signal(signal.SIGTERM)                       # to the launcher only, as `kill PID` or a scheduler would
    out, err = p.communicate(timeout=120)
    assert p.returncode == EXIT_REQUEUE, err[-2000:]
    assert list((tmp_path / 'ck').glob('step_*/manifest.json')) and 'run again with --resume' in err
    code, _, err = _train_main(capsys, [*args, '--metrics', m, '--checkpoint-dir', tmp_path / 'ck', '--resume'])
    assert code == 0, err[-2000:]
    want = dict(_losses(tmp_path / 'whole.jsonl'))
    got = dict(_losses(m))                              # the stopped run's steps, then the resumed run's
    assert sorted(got) == list(range(1, 201)) and all(abs(got[s] - want[s]) <= 1e-6 * abs(want[s]) for s in want), (got, want)


@pytest.mark.parametrize('args, env, msg', [
    (['--timeout', '0'], {}, 'timeout must be >= 0.1'),
    (['--timeout', 'nan'], {}, 'timeout must be finite'),
    (['--model', 'bogus'], {}, "unknown model 'bogus'"),
    (['--seed', '-1'], {}, 'seed must be >= 0'),
    (['--seq-len', '1024'], {}, 'takes 2 to 128 tokens'),
    (['--seq-len', '0'], {}, 'takes 2 to 128 tokens'),
    (['--data', '/no/such/corpus.txt', '--local-ranks', '4'], {}, "corpus path '/no/such/corpus.txt' does not exist"),
    (['--metrics', '/dev/null/m.jsonl', '--local-ranks', '4'], {}, 'metrics: cannot write into'),
    ([], {'WORLD_SIZE': 'abc', 'RANK': '0'}, "WORLD_SIZE='abc' is not a number"),
    ([], {}, 'pass --local-ranks N'),
])
def test_bad_input_is_one_line_and_exit_2(args, env, msg, capsys, monkeypatch):
    "chimera-train's main in this process (its console script is a real process in test_the_command): one line, exit 2."
    for k, v in env.items(): monkeypatch.setenv(k, v)
    monkeypatch.setattr(launch, 'launch_local', lambda *a, **k: pytest.fail('ranks were started for bad input'))
    code, _, err = _train_main(capsys, ['--steps', 1, *args])
    assert code == 2 and msg in err and 'Traceback' not in err, err[-2000:]
    assert err.strip().count('\n') == 0, err


@pytest.mark.timeout(300)
def test_a_searched_schedule_trains_from_its_file_as_plain_training(tmp_path):
    "search_schedule's order, saved and read back as a custom spec, trains with the losses of one process (float64, dropout)."
    from chimera_nb.search import search_schedule
    from chimera_nb.simulate import Costs
    from chimera_nb.cli import read_order
    r = search_schedule(4, 4, Costs([1, 1, 1, 3], [1, 1, 1, 3], [1, 1, 1, 3], p2p=0.2), placements=('single', 'bidirectional'),
                        time_limit=3, method='heuristic')
    path = tmp_path / 'order.txt'; path.write_text(r.schedule.to_text())
    got = train(TC(**{**BASE, **read_order(path)}, steps=3, local_ranks=4))
    ref = train(TC(**BASE, schedule='1f1b', D=1, steps=3, local_ranks=1))
    assert len(got.losses) == 3
    for (s, a), (_, b) in zip(got.losses, ref.losses): assert abs(a - b) <= 1e-9 * abs(b), (s, a, b)


def test_no_progress_bar_into_a_log():
    "Output that is not a terminal (a job's log, a pipe: pytest's captured stderr here) gets no tqdm bar, even with progress on."
    from chimera_nb.train import _bar   # test-only: the bar itself, without a run
    from chimera_nb.spec import PipelineSpec
    assert _bar(TrainConfig(PipelineSpec(model='bert-tiny'), steps=3, progress=True), 0) is None
