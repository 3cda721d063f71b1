"""Training end to end on real processes: schedules log the losses of plain training, the loss falls, kill-and-resume and
SIGTERM-and-resume continue the same trajectory, damaged checkpoints are refused, bad configurations fail before any
process starts, and the chimera-train command."""
import json, math, os, signal, subprocess, sys, time
from pathlib import Path
import pytest
import torch
from chimera_nb.train import TrainConfig, train, latest_checkpoint, EXIT_REQUEUE
from chimera_nb.runtime import PipelineFailure


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
    newest = tmp_path / 'whole' / 'step_00000008' / 'rank00002.pt'
    newest.write_bytes(newest.read_bytes()[:1000])
    d, skipped = latest_checkpoint(c, 4, s.to_text())
    assert d.name == 'step_00000006' and 'rank00002.pt is damaged' in skipped[0]


@pytest.mark.parametrize('cfg, msg', [
    (dict(model='bert-huge'), 'unknown model'),
    (dict(schedule='pipedream'), 'choose one of'),
    (dict(D=8, N=8), 'has 6 layers'),
    (dict(D=4, local_ranks=3), 'local_ranks=3'),
    (dict(data='/no/such/corpus.txt'), 'does not exist'),
    (dict(B=100000), 'fewer than one global batch'),
])
def test_bad_configurations_fail_before_any_process_starts(cfg, msg):
    t = time.monotonic()
    with pytest.raises((ValueError, TypeError, FileNotFoundError), match=msg):
        train(TC(**{**dict(progress=False, local_ranks=4), **cfg}))
    assert time.monotonic() - t < 30


def test_the_command(tmp_path):
    exe = Path(sys.executable).parent / 'chimera-train'
    out = subprocess.run([str(exe), '--stages', '2', '--microbatches', '2', '--steps', '3', '--local-ranks', '2', '--no-progress',
                          '--metrics', str(tmp_path / 'm.jsonl')], capture_output=True, text=True, timeout=200)
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout.splitlines()[-1])['steps'] == 3
    bad = subprocess.run([str(exe), '--stages', '3'], capture_output=True, text=True, timeout=100)
    assert bad.returncode == 2 and 'even number of stages' in bad.stderr and bad.stderr.count('\n') == 1   # one line
    t = time.monotonic(); h = subprocess.run([str(exe), '--help'], capture_output=True, text=True, timeout=100)
    assert h.returncode == 0 and 'micro-batch size' in h.stdout and time.monotonic() - t < 5   # answers without torch


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
