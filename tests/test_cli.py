"""The `chimera-nb plot`, `export` and `slurm` commands through `chimera_nb.cli.main(argv)` in this process (exit codes
from SystemExit, output from capsys), and once as the installed console script in a real process (its exit code and
one-line error)."""
import json, os, re, shutil, subprocess, sys
from pathlib import Path
from typing import NamedTuple
import pytest
from chimera_nb.cli import main

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = Path(sys.executable).parent / 'chimera-nb'
CMD = [str(SCRIPT)] if SCRIPT.exists() else [sys.executable, '-c', 'import sys; from chimera_nb.cli import main; sys.exit(main())']


class Ran(NamedTuple):
    returncode: int
    stdout: str
    stderr: str


@pytest.fixture
def run(capsys):
    "chimera-nb ARGS in this process: Ran(exit code, stdout, stderr); with ok=True the code must be 0."
    def run_(*args, ok=True) -> Ran:
        capsys.readouterr()
        try: code = main([str(a) for a in args])
        except SystemExit as e: code = e.code
        out = capsys.readouterr()
        r = Ran(code or 0, out.out, out.err)
        if ok: assert r.returncode == 0, r.stderr
        return r
    return run_


def test_the_console_script_exits_2_with_one_line():
    "The installed entry point in a real process: a bad option is one line on stderr and exit code 2, no traceback."
    env = dict(os.environ, PYTHONPATH=f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    r = subprocess.run(CMD + ['export', 'chimera', '-D', '5', '-N', '8'], capture_output=True, text=True, env=env, timeout=180)
    assert r.returncode == 2 and 'even number of stages' in r.stderr and r.stderr.count('\n') == 1 and 'Traceback' not in r.stderr


def test_export_forms(run, tmp_path):
    from chimera_nb.schedules import make_schedule
    from chimera_nb.ir import Schedule
    from chimera_nb.torch_order import to_torch_csv
    s = make_schedule('chimera', 4, 8, concat='doubling')
    r = run('export', 'chimera', '-D', 4, '-N', 8, '-o', 'concat=doubling')
    assert r.stdout == s.to_text()
    run('export', 'chimera', '-D', 4, '-N', 8, '-o', 'concat=doubling', '-f', 'csv', '--out', tmp_path / 's.csv')
    assert Schedule.from_csv((tmp_path / 's.csv').read_text()).orders == s.orders
    r = run('export', '1f1b', '-D', 2, '-N', 3, '-f', 'torch-csv')
    assert r.stdout == to_torch_csv(make_schedule('1f1b', 2, 3))
    run('export', 'gpipe', '-D', 2, '-N', 2, '-f', 'trace', '--costs', '1,2,0', '--out', tmp_path / 't.json')
    X = [e for e in json.loads((tmp_path / 't.json').read_text())['traceEvents'] if e['ph'] == 'X']
    assert sorted(e['dur'] for e in X) == [1e6] * 4 + [2e6] * 4      # F = 1 s, B = 2 s in microseconds


def test_export_errors(run, tmp_path):
    r = run('export', 'chimera', '-D', 4, '-N', 8, '-f', 'torch-csv', ok=False)
    assert r.returncode == 2 and 'cannot express it' in r.stderr and 'Traceback' not in r.stderr
    r = run('export', 'chimera', '-D', 5, '-N', 8, ok=False)
    assert r.returncode == 2 and 'even number of stages' in r.stderr
    r = run('export', 'gpipe', '--costs', 'cheap', ok=False)
    assert r.returncode == 2 and "'paper', 'f=b' or three numbers" in r.stderr
    r = run('export', 'gpipe', '-o', 'doubling', ok=False)
    assert r.returncode == 2 and 'key=value' in r.stderr


def test_plot_html(run, tmp_path):
    out = tmp_path / 'sub' / 'chimera.html'
    r = run('plot', 'chimera', '-D', 4, '-N', 8, '--memory', '--theme', 'dark', '--out', out)
    assert f"wrote {out}" in r.stdout
    page = out.read_text()
    assert page.count('class="plotly-graph-div"') == 2 and re.search(r'F0\.(<br>|\\u003cbr\\u003e)d0', page)
    assert '"paper_bgcolor":"rgb(17,17,17)"' in page.replace(' ', '')
    r = run('plot', 'chimera', '--out', tmp_path / 'x.gif', ok=False)
    assert r.returncode == 2 and '.html, .png, .svg or .pdf' in r.stderr


@pytest.mark.skipif(not (shutil.which('chromium') or os.access('/usr/bin/chromium', os.X_OK)), reason='PNG needs Chromium')
def test_plot_png(run, tmp_path):
    out = tmp_path / 'zb.png'
    r = run('plot', 'zb-h1', '-D', 4, '-N', 8, '--costs', 'f=b', '--memory', '--out', out)
    assert out.read_bytes()[:8] == b'\x89PNG\r\n\x1a\n' and out.stat().st_size > 10_000
    mem = tmp_path / 'zb-memory.png'
    assert mem.exists() and f"wrote {out}, {mem}" in r.stdout   # every file it writes is named
    assert 'Traceback' not in r.stderr and '{' not in r.stderr, r.stderr


def test_slurm_calibrate_profiles_history(run, tmp_path, monkeypatch):
    "`chimera-nb slurm calibrate --dry-run` renders the calibration job into the profiles folder; `profiles` lists a kept profile, `history` a run's error."
    import dataclasses, datetime
    from chimera_nb.profile import estimate_profile
    from chimera_nb.hardware import HARDWARE
    monkeypatch.setenv('CHIMERA_PROFILES', str(tmp_path))
    monkeypatch.delenv('SLURM_CONF', raising=False)   # no cluster has hpg-turin here: the dry run checks our rules only
    r = run('slurm', 'calibrate', '--preset', 'hpg-turin', '--nodes', 2, '--model', 'gpt2-tiny', '--account', 'g', '--qos', 'g', '--dry-run')
    assert '#SBATCH --nodes=2' in r.stdout and '#SBATCH --gres=gpu:l4:3' in r.stdout
    assert f'-m chimera_nb.calibrate --profiles {tmp_path} --name hpg-turin-gpt2-tiny-float32 --sizes 1,2,4' in r.stdout
    assert run('slurm', 'profiles').stdout.startswith(f'{tmp_path}: no measured profiles')
    now = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec='seconds')
    dataclasses.replace(estimate_profile('gpt2-tiny', HARDWARE['l4'], 1), source='measured', name='hpg-turin-gpt2-tiny-float32', date=now,
                        machine=dict(gpu='NVIDIA L4')).save(tmp_path / 'hpg-turin-gpt2-tiny-float32.json')
    out = run('slurm', 'profiles', '--gpu', 'b200').stdout
    assert 'hpg-turin-gpt2-tiny-float32' in out and "measured on 'NVIDIA L4', not on 'b200'" in out
    (tmp_path / 'history.jsonl').write_text(json.dumps(dict(date=now, profile='hpg-turin-gpt2-tiny-float32', label='1f1b', W=1, D=2, B=1, N=4,
                                                            predicted_step_s=0.9, measured_step_s=1.0, error=-0.1, stage_error=0.02)) + '\n')
    out = run('slurm', 'history').stdout
    assert re.search(r'hpg-turin-gpt2-tiny-float32\s+1\s+-0\.1\s+0\.1\s+0\.1', out), out
    r = run('slurm', 'calibrate', '--profile-name', '../x', '--dry-run', ok=False)
    assert r.returncode == 2 and "profile name '../x'" in r.stderr


def test_each_slurm_subcommand_shows_its_own_flags_and_a_missing_folder_is_an_error(run, tmp_path):
    "calibrate's help has none of training's flags and no Python in its examples; collect of a folder that is not there exits 2."
    help_ = run('slurm', 'calibrate', '--help').stdout
    for flag in ('--signal-before', '--max-restarts', '--no-requeue', '--name '): assert flag not in help_, flag
    assert '--extra=--constraint=ib' in help_ and "('--" not in help_
    assert '--signal-before' in run('slurm', 'submit', '--help').stdout
    r = run('slurm', 'collect', tmp_path / 'nope', ok=False)
    assert r.returncode == 2 and 'is not a folder' in r.stderr and r.stderr.count('\n') == 1, r.stderr


def test_a_csv_path_is_checked_before_any_work(run, tmp_path, monkeypatch):
    "--csv into a missing folder or onto a folder: one line naming the path and the fix, exit 2, for history, profiles and collect."
    monkeypatch.setenv('CHIMERA_PROFILES', str(tmp_path))
    for cmd in (['history'], ['profiles'], ['collect', tmp_path]):
        for csv, said in ((tmp_path / 'nope' / 't.csv', 'does not exist'), (tmp_path, 'is a folder')):
            r = run('slurm', *cmd, '--csv', csv, ok=False)
            assert r.returncode == 2 and said in r.stderr and r.stderr.count('\n') == 1 and 'Traceback' not in r.stderr, (cmd, r.stderr)
