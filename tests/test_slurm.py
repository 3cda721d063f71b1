"""chimera_nb.slurm against a real SLURM: a single-node cluster on localhost (munged, slurmctld, slurmd from Debian's
slurm-wlm and munge, started by hand, 4 fake GPUs as character devices), stopped by PID at the end.

The jobs are submitted together at the start (they run side by side) and each test waits for its own:
- a 4-task CPU (gloo) Chimera training through the launcher: its metrics, summary, log, reattach, CUDA_VISIBLE_DEVICES set;
  submitted with a JupyterHub session's SLURM_* variables in the environment (they must not reach the job's srun);
- a 2-element job array (Chimera and 1F1B at the same global batch) collected into one DataFrame (slow tier);
- requeue of a running job twice: by `scontrol requeue` (SIGTERM to the ranks) and by SIGUSR1 (as before a time
  limit: the script requeues itself); each run resumes from its checkpoint, no step lost or repeated (slow tier);
- cancel and see CANCELLED; errors: no sbatch, an unsatisfiable request (sbatch's own reason), an unknown partition.
Run: .venv/bin/python -m pytest tests/test_slurm.py -q   (needs root and slurm-wlm + munge; skipped otherwise)
"""
import dataclasses, json, os, re, subprocess, sys, time
from pathlib import Path
import pytest
sys.path.insert(0, str(Path(__file__).parent))
import slurm_cluster
from chimera_nb.spec import TrainConfig, PipelineSpec


def TC(**kw) -> TrainConfig:
    "A run from flat keys (the spec's and training's, as a config file may hold them)."
    return TrainConfig.from_dict(kw)
from chimera_nb.slurm import SlurmJob, submit, Job, SlurmError, FINAL
from chimera_nb.report import collect, read_metrics
from chimera_nb.sweep import submit_sweep, schedule_configs, plot_sweep
from chimera_nb.cli import slurm_main as cli
from chimera_nb.checkpoint import RunComplete

REPO = str(Path(__file__).resolve().parent.parent)
pytestmark = [pytest.mark.slurm, pytest.mark.xdist_group('slurm'),   # the session's cluster (tests/conftest.py), one worker
              pytest.mark.skipif(bool(slurm_cluster.why_not()), reason=f"no local SLURM cluster: {slurm_cluster.why_not()}")]
T = dict(model='bert-tiny', N=4, B=2, progress=False, eval_batches=1, timeout=90.0)


def _job(tmp, name, train, **kw):
    return SlurmJob(train, run_dir=str(tmp / name), name=name, env={'PYTHONPATH': REPO}, mem=None, time='00:20:00', **kw)


@pytest.fixture(scope='module')
def jobs(cluster, tmp_path_factory):
    "Submit the default tier's jobs at once: they run side by side while the tests wait for each."
    tmp = tmp_path_factory.mktemp('runs')
    out = {}
    leak = dict(SLURM_MEM_PER_CPU='1000', SLURM_JOB_ID='999', SLURM_NTASKS='1', SRUN_CPUS_PER_TASK='64', SALLOC_PARTITION='x')  # a JupyterHub session's
    os.environ.update(leak)
    try:
        out['train'] = submit(dataclasses.replace(_job(tmp, 'train', TC(**T, schedule='chimera', D=4, steps=6),
                                                       gpus_per_node=4, gpu_type='fake', allow_cpu=True), mem='3G'))
        out['nocuda'] = submit(_job(tmp, 'nocuda', TC(**T, D=2, steps=2), gpus_per_node=2, gpu_type='fake'))  # GPUs, a CPU torch
        out['nomem'] = submit(_job(tmp, 'nomem', TC(**T, D=2, steps=2), extra=('--mem-per-cpu=1',)))  # 1 MB a CPU for two ranks (--mem=1M: refused by render)
    finally:
        for k in leak: os.environ.pop(k)
    return out


def _steps(run):
    return [r['step'] for r in map(json.loads, open(run / 'metrics.jsonl')) if 'event' not in r] if (run / 'metrics.jsonl').exists() else []


def _until(what, ok, timeout, cluster):
    deadline = time.monotonic() + timeout
    while not ok():
        if time.monotonic() > deadline: raise TimeoutError(f"{what} after {timeout} s\n{cluster.logs()}")
        time.sleep(0.25)


def _steps_alive(job_id):
    "slurmstepd processes of this job on this node (its previous run still ending)."
    out = []
    for p in Path('/proc').iterdir():
        try: cmd = (p / 'cmdline').read_bytes()
        except OSError: continue
        if cmd.startswith(f'slurmstepd: [{job_id}.'.encode()): out.append(p.name)
    return out


def _requeued(job, cluster):
    """Wait until the requeued job is pending again with its previous run gone. SLURM itself holds it back until the old
    run's credential expires (AuthInfo cred_expire, 10 s on this test cluster, 120 s by default): releasing it earlier
    (`scontrol update starttime=now`) makes the restart fail with "Job credential revoked", as it once did here."""
    _until('requeued job pending, old run gone', lambda: job.tasks()[0].state == 'PENDING' and not _steps_alive(job.job_id), 120, cluster)


@pytest.mark.slow   # three runs of one job, minutes of waiting: make test-all (the default tier resumes locally: test_train.py)
@pytest.mark.timeout(300)
def test_requeue_resumes_without_losing_or_repeating_a_step(cluster, tmp_path):
    job = submit(_job(tmp_path, 'requeue', TC(**T, schedule='chimera', D=2, steps=60, seed=5)))
    run = job.run_dir
    _until('two steps', lambda: len(_steps(run)) >= 2, 200, cluster)
    subprocess.run(['scontrol', 'requeue', job.job_id], check=True, capture_output=True)  # SIGTERM to every rank
    _requeued(job, cluster)
    first = len(_steps(run))
    _until('restart 1 trains', lambda: len(_steps(run)) >= first + 2 and job.tasks()[0].restarts == 1, 200, cluster)
    job.cancel(signal='USR1')  # what SLURM sends before the time limit: checkpoint, exit 75, the script requeues
    _requeued(job, cluster)
    seen = []
    state = job.wait(timeout=200, poll=1, max_poll=3, on_poll=lambda ts: seen.append((ts[0].state, ts[0].restarts, ts[0].reason)))
    assert state == 'COMPLETED', (f"states {seen}\nexit codes {(run / 'exit_codes').read_text()}\n{job.log(60)}\n"
                                  + subprocess.run(['scontrol', 'show', 'job', job.job_id], capture_output=True, text=True).stdout
                                  + cluster.logs(60))
    steps = _steps(run)
    assert steps == list(range(1, 61)), steps
    codes = [l.split() for l in (run / 'exit_codes').read_text().splitlines()]
    assert [(c[1], c[2]) for c in codes] == [('1', '75'), ('2', '0')], codes  # restart 0 was killed by the requeue's SIGTERM
    t = job.tasks()[0]
    assert t.restarts == 2 and t.state == 'COMPLETED'
    log = job.log(200)
    assert 'restart 1' in log and 'restart 2' in log and 'requeueing job' in log
    stopped = sorted(p.name for p in (run / 'checkpoints').glob('step_*'))
    assert len(stopped) == 3 and stopped[-1] == 'step_00000060', stopped  # two stops and the end
    print(f"requeue: stopped at {stopped[:2]}, steps 1..60 once each")


@pytest.mark.timeout(240)
def test_four_task_training(jobs, cluster, capsys, tmp_path):
    job = jobs['train']
    assert job.wait(timeout=220, poll=1, max_poll=3) == 'COMPLETED', job.log() + cluster.logs()
    m = job.metrics()
    assert list(m.step) == [1, 2, 3, 4, 5, 6] and m.loss.notna().all() and (m.loss > 0).all()
    assert len(m.saved_activation_bytes[0]) == 4  # four ranks reported
    s = json.loads((job.run_dir / 'metrics-summary.json').read_text())
    assert s['spec']['D'] == 4 and s['spec']['schedule'] == 'chimera' and s['samples_per_s'] > 0
    assert s['spec_key'] == TrainConfig.load(job.run_dir / 'run.toml').spec.key()   # the job trained the spec it carried
    log = job.log()
    assert 'GPUs 0,1,2,3' in log and 'restart 0' in log  # the fake GPUs are visible to the job
    assert (job.run_dir / 'job.sh').read_text().startswith('#!/bin/bash')
    again = Job.attach(job.run_dir); assert again.job_id == job.job_id and again.state == 'COMPLETED'
    by_id = Job.attach(job.job_id); assert Path(by_id.run_dir) == job.run_dir
    capsys.readouterr()
    assert cli(['status', str(job.run_dir)]) == 0 and f"{job.job_id}\tCOMPLETED" in capsys.readouterr().out
    assert cli(['logs', job.job_id, '-n', '3']) == 0 and 'chimera_nb' not in capsys.readouterr().err
    assert cli(['collect', str(job.run_dir), '--csv', str(tmp_path / 'r.csv')]) == 0 and 'chimera' in capsys.readouterr().out
    assert (tmp_path / 'r.csv').read_text().startswith('run,spec_key,schedule')
    assert 'RuntimeWarning' not in log and 'Traceback' not in log, log
    print(f"4-task Chimera: {s['samples_per_s']:.1f} samples/s, final loss {s['final_loss']:.3f}")


@pytest.mark.slow   # a sweep's jobs: make test-all (the default tier renders arrays: test_slurm_render.py, and collects the 4-task run)
@pytest.mark.timeout(240)
def test_array_collected_into_one_dataframe(cluster, tmp_path):
    base = TC(**T, D=2, steps=4)
    sweep = submit_sweep(_job(tmp_path, 'array', base), schedule_configs(base, ('chimera', '1f1b')))  # one array: same world size
    assert len(sweep) == 1
    job = sweep[0]
    assert job.wait(timeout=220, poll=1, max_poll=3) == 'COMPLETED', job.log() + cluster.logs()
    ts = job.tasks()
    assert sorted(t.job_id for t in ts) == [f"{job.job_id}_0", f"{job.job_id}_1"]
    df = collect(job.run_dir.parent)  # the sweep's folder
    assert sorted(df.schedule) == ['1f1b', 'chimera'] and (df.global_batch == 8).all() and (df.samples_per_s > 0).all()
    assert len(plot_sweep(df).data) == 2
    m = read_metrics(job.run_dir)
    assert sorted(m.task.unique()) == ['task-0', 'task-1'] and len(m) == 8
    print(df[['schedule', 'D', 'samples_per_s', 'final_loss']].to_string(index=False))


@pytest.mark.slow   # one more training job: make test-all (the default tier: the 4-task run carries its spec, test_four_task_training)
@pytest.mark.timeout(240)
def test_the_tuners_pick_trains_as_predicted(cluster, tmp_path):
    "autotune's first pick -> sbatch -> the job's run logs the same spec key, model, dtype and sequence length."
    from chimera_nb.autotune import autotune
    from chimera_nb.hardware import HARDWARE
    best = autotune(2, 8, model='bert-tiny', hardware=HARDWARE['p100-daint'], micro_batch_sizes=[2, 4], recompute=[False],
                    schedules=['chimera', '1f1b', 'zb-h1']).best   # the tuner's first pick goes to the job as it is
    job = submit(_job(tmp_path, 'tuned', TrainConfig(best, steps=3, progress=False, eval_batches=1, timeout=90.0)))
    assert job.wait(timeout=220, poll=1, max_poll=3) == 'COMPLETED', job.log() + cluster.logs()
    s = json.loads((job.run_dir / 'metrics-summary.json').read_text())
    assert s['spec_key'] == best.key() and PipelineSpec.from_dict(s['spec']) == best
    assert (s['spec']['model'], s['spec']['dtype'], s['spec']['seq_len']) == ('bert-tiny', 'float32', 32)
    start = json.loads((job.run_dir / 'metrics.jsonl').read_text().splitlines()[0])
    assert start['event'] == 'start' and start['spec_key'] == best.key()
    assert f'# spec {best.key()}' in (job.run_dir / 'job.sh').read_text()


@pytest.mark.timeout(120)
def test_gpus_without_cuda_fail_at_once_with_the_reason(jobs, cluster):
    job = jobs['nocuda']
    with pytest.raises(SlurmError, match=r'ended FAILED: .*sees no CUDA.*allow_cpu'):
        job.wait(timeout=100, poll=1, max_poll=3)
    assert not (job.run_dir / 'metrics.jsonl').exists()   # stopped before training


@pytest.mark.timeout(120)
def test_a_node_short_of_host_memory_stops_before_any_rank(jobs, cluster):
    "The script's check (chimera_nb.memory) against SLURM's memory (here --mem-per-cpu x the node's CPUs): one line, exit 2, before srun starts a rank."
    job = jobs['nomem']
    with pytest.raises(SlurmError, match=r"ended FAILED: .*host memory: the 2 ranks of one node need .*, but SLURM's --mem-per-cpu x \d+ CPUs gives"):
        job.wait(timeout=100, poll=1, max_poll=3)
    assert not (job.run_dir / 'metrics.jsonl').exists() and 'Traceback' not in job.log()   # stopped before training, in one line


@pytest.mark.timeout(180)
def test_resubmitting_into_a_folder_with_checkpoints(jobs, cluster, tmp_path, capsys):
    job = jobs['train']
    assert job.wait(timeout=170, poll=1, max_poll=3) == 'COMPLETED', job.log() + cluster.logs()
    same = TrainConfig.load(job.run_dir / 'run.toml')
    with pytest.raises(RunComplete, match='is complete: step 6 of 6'):   # the finished run again: nothing to submit
        submit(dataclasses.replace(_job(job.run_dir.parent, 'train', same, gpus_per_node=4, gpu_type='fake', allow_cpu=True), mem='3G'),
               dry_run=True)
    assert cli(['submit', '--run-dir', str(job.run_dir), '--dry-run', '--', '--config', str(job.run_dir / 'run.toml')]) == 0   # no failure
    assert 'is complete: step 6 of 6' in capsys.readouterr().err
    more = same.replace(steps=9, resume_anyway='steps')                  # the same run, longer: it resumes its checkpoints
    with pytest.warns(UserWarning, match='holds checkpoints up to step 6: this job resumes them'):
        submit(dataclasses.replace(_job(job.run_dir.parent, 'train', more, gpus_per_node=4, gpu_type='fake', allow_cpu=True), mem='3G'),
               dry_run=True)
    with pytest.raises(ValueError, match=r'lr, steps differ.*fresh run folder'):
        submit(_job(job.run_dir.parent, 'train', same.replace(steps=9, lr=1e-4), gpus_per_node=4, gpu_type='fake', allow_cpu=True), dry_run=True)
    with pytest.raises(ValueError, match="unknown text classification data 'reuters-r9'"):
        submit(_job(tmp_path, 'baddata', TC(**T, D=2, steps=2, task='classify', data='reuters-r9')))
    assert not (tmp_path / 'baddata').exists()   # refused before anything was written
    assert cli(['submit', '--run-dir', str(tmp_path / 'ck'), '--mem', '4gb', '--dry-run', '--', '-D', '2', '--checkpoint-every', '10']) == 0


@pytest.mark.timeout(120)
def test_cancel_and_see_the_state(cluster, tmp_path):
    job = submit(_job(tmp_path, 'cancel', TC(**T, D=2, steps=1000)))
    _until('running', lambda: job.tasks()[0].state == 'RUNNING', 60, cluster)
    assert cli(['cancel', job.job_id]) == 0
    assert job.wait(timeout=90, poll=0.5, max_poll=2) == 'CANCELLED'   # a cancel is not a failure: no error
    assert job.tasks()[0].state == 'CANCELLED'


@pytest.mark.timeout(60)
def test_errors_quote_the_scheduler(cluster, tmp_path, monkeypatch, capsys):
    train = TC(**T, D=2, steps=2)
    with pytest.raises(SlurmError, match=r"sbatch refused the job: .*(Requested node configuration is not available|gres)"):
        submit(_job(tmp_path, 'toomany', train, gpus_per_node=8, gpu_type='fake', tasks_per_node=2, cpus_per_task=4))
    with pytest.raises(SlurmError, match=r"sbatch refused the job: .*[Pp]artition"):
        submit(_job(tmp_path, 'nopart', train, partition='nosuchpart'))
    capsys.readouterr()
    assert cli(['submit', '--run-dir', str(tmp_path / 'ok'), '--mem', '4gb', '--dry-run', '--', '--stages', '2']) == 0   # the dry run asks the controller
    assert 'sbatch --test-only accepts it' in capsys.readouterr().err
    for flags, reason in ((['--partition', 'nope'], '[Pp]artition'), (['--mem', '999gb'], 'node configuration is not available')):
        assert cli(['submit', '--run-dir', str(tmp_path / 'dry'), *flags, '--dry-run', '--', '--stages', '2']) == 1, flags
        out = capsys.readouterr()
        assert re.search(f"sbatch --test-only refuses the job: .*{reason}", out.err) and out.err.count('\n') == 1 and not out.out, out
    monkeypatch.setenv('PATH', '/nonexistent')
    with pytest.raises(SlurmError, match="not a SLURM node.*render"):
        submit(_job(tmp_path, 'nosbatch', train))
    assert not (tmp_path / 'nosbatch').exists()  # a failed submit leaves nothing behind
    assert not (tmp_path / 'toomany').exists() and not (tmp_path / 'nopart').exists()
    assert cli(['submit', '--run-dir', str(tmp_path / 'cli'), '--', '--stages', '2']) == 1
    assert 'not a SLURM node' in capsys.readouterr().err
    assert cli(['submit', '--run-dir', str(tmp_path / 'cli'), '--dry-run', '--', '--stages', '2']) == 0  # rendering needs no SLURM
    out = capsys.readouterr()
    assert '#SBATCH --ntasks-per-node=2' in out.out and "no sbatch on this machine: checked against chimera_nb's rules only" in out.err


WATCH_JS = """() => { const gd = document.querySelector('.jp-OutputArea-output .js-plotly-plot');
  const tables = Array.from(document.querySelectorAll('.jp-OutputArea-output table')).map(t => t.innerText);
  const line = Array.from(document.querySelectorAll('.jp-OutputArea-output .widget-html')).map(h => h.innerText).find(t => t.includes('step')) || '';
  return {traces: gd ? gd.querySelectorAll('.scatterlayer .trace').length : 0, status: tables.join(' '), line}; }"""


@pytest.mark.browser
@pytest.mark.timeout(420)
def test_job_watch_in_jupyterlab_survives_reload_and_restart(cluster, lab, pages, tmp_path):
    "The watch of a finished job in a real JupyterLab: state, loss, measured vs predicted step; a reload redraws it; a restart says what to re-run."
    from lab_server import run_all, screenshot, wait_for, reload_until, restart_kernel
    job = submit(_job(tmp_path, 'watched', TC(**T, schedule='1f1b', D=2, steps=3)))   # its own job: the browser tier runs apart
    assert job.wait(timeout=220, poll=1, max_poll=3) == 'COMPLETED', job.log() + cluster.logs()
    cell = f"from chimera_nb.slurm import Job\nfrom chimera_nb.job_widgets import watch\nw = watch(Job.attach({str(job.run_dir)!r}), poll=1, max_poll=2)\nw"
    (lab['root'] / 'watch.ipynb').write_text(json.dumps({"cells": [{"cell_type": "code", "execution_count": None, "id": "watch", "metadata": {},
                                                                    "outputs": [], "source": cell}],
                                                         "metadata": {"kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"}},
                                                         "nbformat": 4, "nbformat_minor": 5}))
    done = lambda s: 'COMPLETED' in s['status'] and s['traces'] == 3 and 'measured vs' in s['line'] and 'predicted' in s['line']
    page, errors = pages.notebook(lab, 'watch.ipynb')
    run_all(page)
    before = wait_for(page, lambda p: p.evaluate(WATCH_JS), done, 120, 'the watch')
    wait_for(page, lambda p: p.locator('.jp-OutputArea-output .js-plotly-plot').count(), lambda n: n == 2, 60, 'the run timeline under the watch')
    assert 'chimera-slurm collect' in page.locator('.jp-OutputArea-output').first.inner_text()   # the collected results, in the app
    page.keyboard.press('Control+s')
    wait_for(page, lambda p: p.locator('.jp-mod-dirty').count(), lambda n: n == 0, 30, 'the save')
    screenshot(page, tmp_path, 'watch-1.png', full=False)
    after, reloads = reload_until(page, lambda p: p.evaluate(WATCH_JS), done, 60, 'the watch after a reload')
    assert not page.locator('.chimera-rerun').is_visible()
    screenshot(page, tmp_path, 'watch-2-reloaded.png', full=False)
    restart_kernel(page)
    page.reload(); page.wait_for_selector('.jp-Notebook .jp-Cell', timeout=90_000)
    line = page.locator('.chimera-rerun')
    line.wait_for(state='visible', timeout=60_000)
    assert 'job watch' in line.inner_text() and 'run this cell again' in line.inner_text(), line.inner_text()
    screenshot(page, tmp_path, 'watch-3-restarted.png', full=False)
    print(f"{reloads} reload(s); redrawn by the restorer: {sum('[chimera] redrew' in e for e in errors)}")
    print(f"watch before {before}\nafter reload {after}\nscreenshots in {tmp_path}")
