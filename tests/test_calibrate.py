"""Issue 38's loop against a real SLURM (the single-node slurm-wlm cluster of tests/slurm_cluster.py, CPU, gloo):
calibrate the partition (a SLURM job of 2 tasks that profiles bert-tiny's layers at two micro-batch sizes, times the
link between its tasks and the all-reduce, and writes a Profile into the profiles folder) -> the profile (its hosts,
links, job) -> autotune with it (the ranking says what it predicted with; the spec names the profile) -> a training job
of the tuner's first choice -> its summary compares the profile's prediction with the measured step, and the profile's
history (chimera-slurm history) holds the run's error. A stale profile and one of another GPU are refused with the reason.
The GPU side (NCCL, the GPU's name and driver, links across nodes) is the same code on CUDA; it is not exercised here.
Run: .venv/bin/python -m pytest tests/test_calibrate.py -q   (needs root and slurm-wlm + munge; skipped otherwise)
"""
import contextlib, io, json, math, os, socket, sys
from pathlib import Path
import pytest
sys.path.insert(0, str(Path(__file__).parent))
import slurm_cluster
from chimera_nb.spec import TrainConfig
from chimera_nb.slurm import SlurmJob, submit, check_job
from chimera_nb.calibrate import calibration_job
from chimera_nb.profile import Profile, measured_profiles
from chimera_nb.autotune import autotune
from chimera_nb.report import prediction_history
from chimera_nb.cli import slurm_main

REPO = str(Path(__file__).resolve().parent.parent)
pytestmark = [pytest.mark.slurm, pytest.mark.xdist_group('slurm'),   # the session's cluster (tests/conftest.py), one worker
              pytest.mark.skipif(bool(slurm_cluster.why_not()), reason=f"no local SLURM cluster: {slurm_cluster.why_not()}")]
NAME = 'local-bert-tiny-float32'   # calibration_job's name for the generic preset (no partition), bert-tiny, float32


@pytest.fixture
def profiles(cluster, tmp_path, monkeypatch):
    "A profiles folder of this test's own on the session's cluster; sbatch passes CHIMERA_PROFILES on to the jobs."
    (tmp_path / 'profiles').mkdir()
    monkeypatch.setenv('CHIMERA_PROFILES', str(tmp_path / 'profiles'))
    return tmp_path / 'profiles'


@pytest.mark.slow   # two jobs end to end, minutes: make test-all (the default tier renders the calibration job: test_cli.py)
def test_calibrate_tune_run_history(cluster, profiles, tmp_path, monkeypatch):
    job = calibration_job('generic', 'bert-tiny', tasks_per_node=2, sizes=(1, 2), env={'PYTHONPATH': REPO}, mem=None, time='00:10:00')
    assert job.world == 2 and job.program[:5] == ('chimera_nb.calibrate', '--profiles', str(profiles), '--name', NAME)
    cal = submit(job)
    assert cal.wait(timeout=200, poll=1, max_poll=3) == 'COMPLETED', cal.log() + cluster.logs()

    # the profile: written by the job into the folder, with where and how it was measured
    p = Profile.named(NAME).check_use('bert-tiny', 'cpu')
    assert p.machine['hosts'] == [socket.gethostname()] * 2 and p.machine['job_id'] == cal.job_id and p.gpus_per_node == 2
    assert set(p.machine["links"]) == {"p2p_intra", "allreduce", "reduce_scatter", "all_gather"} and 1e6 < p.p2p_bandwidth < 1e12 and p.ar_beta > 0
    assert p.fixed and 'gloo x2' in p.device and p.versions['torch'] and (Path(cal.run_dir) / 'profile.json').is_file()
    assert list(measured_profiles().name) == [NAME] and measured_profiles().refused[0] == ''

    # the tuner ranks with it, says so, and its specs name it
    tu = autotune(2, 8, hardware=NAME, model='bert-tiny', micro_batch_sizes=[2], recompute=[False], schedules=['1f1b', 'gpipe'])
    assert tu.basis.startswith(f'measured profile {NAME} (cpu') and NAME in repr(tu)
    best = tu.best
    assert best.hardware == NAME and best.W * best.D == 2

    # refused with the reason: another GPU than the job's; a profile older than the limit
    with pytest.raises(ValueError, match=f"measured profile '{NAME}' was measured on 'cpu"):
        check_job(SlurmJob(TrainConfig(best), gpus_per_node=2, gpu_type='b200', allow_cpu=True))
    with monkeypatch.context() as m:
        m.setenv('CHIMERA_PROFILE_MAX_AGE_DAYS', '1e-9')
        with pytest.raises(ValueError, match='is stale: measured'): autotune(2, 8, hardware=NAME, model='bert-tiny', micro_batch_sizes=[2])

    # a run of the first choice: its prediction from the profile beside its measured step, kept in the profile's history
    run = submit(SlurmJob(TrainConfig(best, steps=4, progress=False, eval_batches=1, timeout=90.0), run_dir=str(tmp_path / 'run'),
                          name='tuned', env={'PYTHONPATH': REPO}, mem=None, time='00:10:00'))
    assert run.wait(timeout=200, poll=1, max_poll=3) == 'COMPLETED', run.log() + cluster.logs()
    summary = json.loads((tmp_path / 'run' / 'metrics-summary.json').read_text())
    assert summary['hardware'] == NAME and summary['hardware_step_s'] > 0 and summary['history'] == str(profiles / 'history.jsonl')
    h = prediction_history()
    assert len(h) == 1 and h.profile[0] == NAME and h.run[0] == str(tmp_path / 'run' / 'metrics.jsonl')
    assert math.isclose(h.error[0], summary['hardware_step_s'] / summary['measured_step_s'] - 1) and h.D[0] == best.D
    per = prediction_history(by_profile=True)
    assert per.runs.tolist() == [1] and math.isclose(per.mean_abs_error[0], abs(h.error[0]))
    print(f"\ncalibrated {NAME}: p2p {p.p2p_latency * 1e6:.0f} us + {p.p2p_bandwidth / 1e9:.2f} GB/s, all-reduce α {p.ar_alpha * 1e6:.0f} us "
          f"β {p.ar_beta * 1e9:.3f} ns/B; {best.label} W={best.W} D={best.D} B={best.B} N={best.N}: predicted {summary['hardware_step_s'] * 1e3:.1f} ms, "
          f"measured {summary['measured_step_s'] * 1e3:.1f} ms ({h.error[0]:+.1%}); the stages profiled at the start: {summary.get('prediction_error', math.nan):+.1%}")

    out = io.StringIO()
    with contextlib.redirect_stdout(out): assert slurm_main(['history']) == 0
    assert NAME in out.getvalue() and 'mean_abs_error' in out.getvalue()
