"""One run per folder, read only inside it (issue 35): checkpoints read only regular files directly inside their own step
folder, within the manifest's sizes, their step the manifest's and their folder's; a run holds its checkpoint folder and
metrics file (flock) and never writes over another run's checkpoints or metrics; a second Ctrl-C stops at once, in one
line, leaving every sealed checkpoint whole. Faults are real: files, links, FIFOs, processes, signals."""
import hashlib, json, os, shutil, signal, subprocess, sys, textwrap, time
from pathlib import Path
import pytest
from hypothesis import given, settings, strategies as st, HealthCheck
from tiers import examples   # the Hypothesis profile: fewer examples in make test, all in make test-all
from chimera_nb.spec import TrainConfig, PipelineSpec
from chimera_nb.checks import SpecError
from chimera_nb.checkpoint import read_manifest, verify_checkpoint, latest_checkpoint, check_resume, config_differences
from chimera_nb.report import MetricsLog, summary_path
from chimera_nb.train import train, run_command
from chimera_nb.failures import PipelineFailure
from chimera_nb import launch
from chimera_nb.cli import parse_config

SMALL = dict(model='bert-tiny', D=2, N=2, B=2, progress=False, eval_batches=1, local_ranks=2, lr=3e-3)
CLI = ['-D', 2, '-N', 2, '--local-ranks', 2, '--no-progress', '--eval-batches', 1]


def TC(**kw) -> TrainConfig: return TrainConfig.from_dict({**SMALL, **kw})

def _sha(b: bytes) -> str: return hashlib.sha256(b).hexdigest()

def _schedule(cfg) -> str: return cfg.spec.make().to_text()

def _cli(*args, timeout=120, **kw):
    return subprocess.Popen([sys.executable, '-m', 'chimera_nb.cli', 'train', *map(str, args)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, **kw)

def _one_line_error(stderr: str, *words):
    "The command's last stderr line says it, and no traceback came before it."
    last = stderr.strip().splitlines()[-1]
    assert 'Traceback' not in stderr and all(w in last for w in words), stderr[-3000:]
    return last


@pytest.fixture(scope='module')
def run(tmp_path_factory):
    "A real run of 4 steps on 2 processes, checkpoints at steps 2 and 4, metrics whose summary and timeline paths were links."
    root = tmp_path_factory.mktemp('run')
    outside = {n: root / f'outside-{n}' for n in ('summary', 'timeline')}
    for p in outside.values(): p.write_text('not yours')
    (root / 'm-summary.json').symlink_to(outside['summary']); (root / 'm-timeline.html').symlink_to(outside['timeline'])
    cfg = TC(steps=4, checkpoint_every=2, checkpoint_dir=str(root / 'ck'), metrics=str(root / 'm.jsonl'))
    res = train(cfg)
    return dict(root=root, cfg=cfg, res=res, outside=outside)


def _copy(run, tmp_path) -> TrainConfig:
    "The run's checkpoints copied to a folder of their own (each test damages its own)."
    shutil.copytree(run['root'] / 'ck', tmp_path / 'ck')
    return run['cfg'].replace(checkpoint_dir=str(tmp_path / 'ck'))


def _rewrite(d: Path, **changes) -> dict:
    m = json.loads((d / 'manifest.json').read_text()); m.update(changes)
    (d / 'manifest.json').write_text(json.dumps(m)); return m


# ---- 3: the summary and timeline beside the metrics replace a link, never write through it

def test_summary_and_timeline_replace_links_not_write_through(run):
    root = run['root']
    assert all(p.read_text() == 'not yours' for p in run['outside'].values())
    for name in ('m-summary.json', 'm-timeline.html'):
        assert not (root / name).is_symlink() and (root / name).is_file()
    assert json.loads((root / 'm-summary.json').read_text())['steps'] == 4
    assert [p.name for p in root.iterdir() if p.name.startswith('.')] == []   # no temporary file left


# ---- 2: checkpoints read only inside their own step folder

@pytest.mark.parametrize('name', ['../../outside.json', '/ABS/outside.json', 'sub/rank00000.json'])
def test_a_manifest_naming_a_file_outside_with_its_hash_is_damaged(run, tmp_path, name):
    cfg = _copy(run, tmp_path); d = tmp_path / 'ck' / 'step_00000004'
    data = (d / 'rank00000.json').read_bytes()
    target = Path(name.replace('/ABS', str(tmp_path))) if name.startswith('/ABS') else d / name
    target.parent.mkdir(parents=True, exist_ok=True); target.write_bytes(data)   # the right bytes, where the manifest points
    m = json.loads((d / 'manifest.json').read_text()); files = m['files']
    files[name.replace('/ABS', str(tmp_path))] = files.pop('rank00000.json')
    _rewrite(d, files=files)
    best, skipped = latest_checkpoint(cfg, 2, _schedule(cfg))
    assert best.name == 'step_00000002' and skipped[0].startswith('step_00000004: its manifest is malformed'), skipped


def test_nothing_outside_the_folder_is_opened(run, tmp_path):
    "A manifest naming a FIFO outside: were it opened for reading, this would hang; it is refused by its name."
    cfg = _copy(run, tmp_path); d = tmp_path / 'ck' / 'step_00000004'
    os.mkfifo(tmp_path / 'trap')
    m = json.loads((d / 'manifest.json').read_text()); m['files']['../../trap'] = m['files'].pop('rank00001.json')
    _rewrite(d, files=m['files'])
    best, skipped = latest_checkpoint(cfg, 2, _schedule(cfg))   # opened, the FIFO would hang it: the test's timeout would stop it
    assert best.name == 'step_00000002'


@pytest.mark.parametrize('fault, why', [
    ('fifo manifest', 'not a regular file'),
    ('manifest -> /dev/zero', 'symbolic link'),
    ('sparse manifest past the limit', 'more than a manifest may have'),
    ('deep manifest', 'nested deeper than'),
    ('config.spec = 5', 'malformed'),
    ('config = []', 'malformed'),
    ('rank file -> a copy outside', 'symbolic link'),
    ('rank file is a FIFO', 'not a regular file'),
    ('step folder -> elsewhere', 'symbolic link'),
    ('rank file grew', 'is damaged'),
])
def test_a_damaged_newest_checkpoint_falls_back_to_the_one_before(run, tmp_path, fault, why):
    "Each fault: no hang, no MemoryError or RecursionError or AttributeError; step 4 skipped with its reason, step 2 used."
    cfg = _copy(run, tmp_path); ck = tmp_path / 'ck'; d = ck / 'step_00000004'; man = d / 'manifest.json'
    if fault == 'fifo manifest': man.unlink(); os.mkfifo(man)
    elif fault == 'manifest -> /dev/zero': man.unlink(); man.symlink_to('/dev/zero')
    elif fault == 'sparse manifest past the limit': os.truncate(man, (64 << 20) + 10)
    elif fault == 'deep manifest': man.write_text('[' * 200000 + ']' * 200000)
    elif fault == 'config.spec = 5': _rewrite(d, config={**json.loads(man.read_text())['config'], 'spec': 5})
    elif fault == 'config = []': _rewrite(d, config=[])
    elif fault == 'rank file -> a copy outside':
        shutil.copy(d / 'rank00001.safetensors', tmp_path / 'copy'); (d / 'rank00001.safetensors').unlink()
        (d / 'rank00001.safetensors').symlink_to(tmp_path / 'copy')
    elif fault == 'rank file is a FIFO': (d / 'rank00001.json').unlink(); os.mkfifo(d / 'rank00001.json')
    elif fault == 'step folder -> elsewhere': shutil.move(d, tmp_path / 'elsewhere'); d.symlink_to(tmp_path / 'elsewhere')
    elif fault == 'rank file grew':
        with open(d / 'rank00000.json', 'ab') as f: f.write(b' ')
    best, skipped = latest_checkpoint(cfg, 2, _schedule(cfg))   # a FIFO opened would hang: the test's timeout would stop it
    assert best.name == 'step_00000002' and skipped[0].startswith('step_00000004: ') and why in skipped[0], skipped
    if fault not in ('rank file -> a copy outside', 'rank file is a FIFO', 'rank file grew'):
        assert check_resume(cfg.replace(resume=True)) == 2   # the manifest-only check skips it too


def test_a_copy_named_for_a_later_step_is_skipped_and_named_on_resume(run, tmp_path, capfd):
    "step_4 copied to step_99999999: resumed at step 4 (the manifest's), the copy named in the log, not at 99,999,999."
    cfg = _copy(run, tmp_path); ck = tmp_path / 'ck'
    shutil.copytree(ck / 'step_00000004', ck / 'step_99999999')
    assert check_resume(cfg) == 4
    res = train(cfg.replace(steps=5, resume=True, resume_anyway='steps', metrics=None))
    assert [s for s, _ in res.losses] == [4], res.losses
    err = capfd.readouterr().err
    assert 'checkpoint step_99999999: its manifest says step 4, not the step its folder is named for' in err, err[-2000:]


# hypothesis: whatever a manifest holds, reading it answers (manifest, None) or (None, why), and what it accepts is safe to use

_json = st.recursive(st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats(allow_nan=False) | st.text(max_size=12),
                     lambda kids: st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=8), kids, max_size=4), max_leaves=24)


def _base_manifest(d: Path) -> dict:
    cfg = TC(steps=4)
    blobs = {f'rank{r:05d}.{x}': f'{r}{x}'.encode() for r in range(2) for x in ('safetensors', 'json')}
    for n, b in blobs.items(): (d / n).write_bytes(b)
    return dict(format=2, step=4, world=2, schedule='s', spec_key='k', config=cfg.to_dict(),
                files={n: dict(size=len(b), sha256=_sha(b)) for n, b in blobs.items()})


def _check_answer(d: Path):
    m, why = read_manifest(d)
    assert (m is None) != (why is None) and (why is None or (isinstance(why, str) and '\n' not in why))
    if m is not None:   # accepted: its step is its folder's, its files are plain names inside, its config compares
        assert d.name == f"step_{m['step']:08d}" and all('/' not in n and n.startswith('rank') for n in m['files'])
        config_differences(m['config'], TC(steps=4))
        verify_checkpoint(d, 2, 's')


@settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(path=st.sampled_from([('format',), ('step',), ('world',), ('schedule',), ('config',), ('config', 'spec'), ('config', 'lr'),
                             ('config', 'spec', 'D'), ('files',), ('files', 'rank00000.json'), ('files', 'rank00001.json', 'size'),
                             ('files', 'rank00000.safetensors', 'sha256'), ('files', '../x')]),
       value=_json)
def test_hypothesis_any_field_of_a_manifest(tmp_path, path, value):
    d = tmp_path / 'step_00000004'; d.mkdir(exist_ok=True)
    m = _base_manifest(d); node = m
    for k in path[:-1]: node = node[k]
    node[path[-1]] = value
    (d / 'manifest.json').write_text(json.dumps(m))
    _check_answer(d)


@settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.binary(max_size=300) | _json.map(lambda v: json.dumps(v).encode()))
def test_hypothesis_any_bytes_as_a_manifest(tmp_path, data):
    d = tmp_path / 'step_00000004'; d.mkdir(exist_ok=True)
    (d / 'manifest.json').write_bytes(data)
    _check_answer(d)


# ---- 3: one run per folder

_HOLDER = textwrap.dedent('''
    import fcntl, os, platform, sys, time
    fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o644)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    if sys.argv[2] == 'note': os.ftruncate(fd, 0); os.pwrite(fd, f"pid {os.getpid()} on {platform.node()}\\n".encode(), 0)
    print('held', flush=True); time.sleep(120)''')


def _holder(path: Path, note=True) -> subprocess.Popen:
    "Another process holding `path` as a run does (the same flock and note), until killed."
    p = subprocess.Popen([sys.executable, '-c', _HOLDER, str(path), 'note' if note else ''], stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == 'held'
    return p


def test_a_second_run_into_a_held_folder_is_refused_naming_the_holder_and_freed_when_it_dies(tmp_path, capsys):
    ck = tmp_path / 'ck'; ck.mkdir()
    holder = _holder(ck / 'lock')
    try:
        with pytest.MonkeyPatch.context() as m:   # refused before any process starts
            m.setattr(launch, 'launch_local', lambda *a, **k: pytest.fail('ranks were started for a refused run'))
            assert run_command(TC(steps=2, checkpoint_dir=str(ck))) == 2
        err = capsys.readouterr().err
        assert err.count('\n') == 1 and f"is in use by another run (pid {holder.pid} on " in err and '--checkpoint-dir' in err, err
    finally:
        holder.kill(); holder.wait(10)   # a crash: flock goes with the process
    from chimera_nb.train import _holding   # test-only: the lock itself, without a run
    with _holding(TC(steps=2, checkpoint_dir=str(ck)), check=True): pass


def test_a_held_metrics_file_is_refused(tmp_path, capsys):
    m = tmp_path / 'm.jsonl'; m.touch()
    holder = _holder(m, note=False)
    try:
        assert run_command(TC(steps=2, metrics=str(m))) == 2
        err = capsys.readouterr().err
        assert err.count('\n') == 1 and f"metrics '{m}' is in use by another run: wait for it to end, or give another --metrics" in err, err
    finally:
        holder.kill(); holder.wait(10)


def test_every_rank_stops_when_rank_0_finds_the_folder_held(tmp_path):
    "Under torchrun / srun rank 0 takes the lock: refused, every rank stops with it at once (ranks on threads here)."
    from chimera_nb.comm import run_threads
    from chimera_nb.train import train_rank, prepare_data
    ck = tmp_path / 'ck'; ck.mkdir()
    holder = _holder(ck / 'lock')
    try:
        cfg = TC(steps=2, checkpoint_dir=str(ck), local_ranks=0)
        with pytest.raises(PipelineFailure) as e: run_threads(train_rank, 2, cfg, prepare_data(cfg), timeout=60)
        msg = str(e.value)
        assert f"rank 0: SpecError: checkpoint_dir '{ck}' is in use by another run (pid {holder.pid}" in msg, msg
        assert 'rank 1: SpecError: rank 0 found' in msg, msg   # told by rank 0, not stopped by its own 60 s timeout
    finally:
        holder.kill(); holder.wait(10)


def test_a_fresh_run_never_writes_over_checkpoints(run, tmp_path, capsys):
    cfg = _copy(run, tmp_path)
    before = {p: p.stat().st_mtime_ns for p in (tmp_path / 'ck').rglob('*')}
    for c, whose in ((cfg.replace(metrics=None), 'of this configuration'), (cfg.replace(metrics=None, lr=0.5), 'of another configuration')):
        assert run_command(c) == 2
        err = capsys.readouterr().err
        assert err.count('\n') == 1 and f"already holds checkpoints {whose} (newest step_00000004): pass --resume" in err and '--checkpoint-dir' in err, err
    after = {p: p.stat().st_mtime_ns for p in (tmp_path / 'ck').rglob('*') if p.name != 'lock'}
    assert after == {p: t for p, t in before.items() if p.name != 'lock'}


def test_metrics_of_another_run_are_never_appended_to(run, tmp_path, capsys):
    m = tmp_path / 'm.jsonl'; shutil.copy(run['root'] / 'm.jsonl', m); before = m.read_bytes()
    cases = [(TC(steps=2, metrics=str(m)), "already holds a run's metrics: give a new --metrics path, or --resume"),
             (TC(steps=2, metrics=str(m), N=4, resume=True, checkpoint_dir=str(tmp_path / 'new')), 'holds the metrics of another run (N differ)')]
    for cfg, words in cases:
        assert run_command(cfg) == 2
        err = capsys.readouterr().err
        assert err.count('\n') == 1 and words in err, err
    assert m.read_bytes() == before and not summary_path(m).exists()


@pytest.mark.parametrize('kind', ['fifo', 'folder', 'link', 'fifo summary', 'folder timeline'])
def test_a_metrics_path_that_is_not_a_file_is_refused_at_once(tmp_path, capsys, kind):
    m = tmp_path / 'm.jsonl'
    if kind == 'fifo': os.mkfifo(m)
    elif kind == 'folder': m.mkdir()
    elif kind == 'link': (tmp_path / 'real.jsonl').touch(); m.symlink_to(tmp_path / 'real.jsonl')
    elif kind == 'fifo summary': os.mkfifo(summary_path(m))
    elif kind == 'folder timeline': (tmp_path / 'm-timeline.html').mkdir()
    with pytest.MonkeyPatch.context() as mp:   # refused before any process starts (a FIFO opened would hang)
        mp.setattr(launch, 'launch_local', lambda *a, **k: pytest.fail('ranks were started for a refused run'))
        assert run_command(TC(steps=2, metrics=str(m))) == 2
    err = capsys.readouterr().err
    assert err.count('\n') == 1 and 'metrics' in err, err


def test_a_device_as_metrics_is_refused():
    assert MetricsLog('/dev/null').refusal(TC(steps=2)) == '/dev/null is a device: give a --metrics path whose files can be written'
    with pytest.raises(OSError, match='not a regular file'): MetricsLog('/dev/null').write(step=1)


@settings(max_examples=examples(100), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(lines=st.lists(st.binary(max_size=80) | _json.map(lambda v: json.dumps(v).encode()), max_size=5), resume=st.booleans(),
       own_start=st.booleans())
def test_hypothesis_any_metrics_file(tmp_path, lines, resume, own_start):
    "Whatever a metrics file holds, `refusal` answers None or one line; a fresh run refuses anything there; its own run resumes."
    cfg = TC(steps=2, resume=resume, checkpoint_dir=str(tmp_path))
    start = json.dumps(dict(event='start', step=0, spec_key=cfg.spec.key(), spec=cfg.spec.to_dict())).encode()
    body = b'\n'.join(([start] if own_start else []) + lines)
    m = tmp_path / 'm.jsonl'; m.write_bytes(body)
    why = MetricsLog(m).refusal(cfg)
    assert why is None or (isinstance(why, str) and '\n' not in why.replace(str(m), ''))
    if not resume and body.strip(): assert why is not None
    if resume and own_start and not any(l.startswith(b'{"event": "start"') for l in lines): assert why is None


# ---- 4: a second Ctrl-C

_INTERRUPT_SAVE = textwrap.dedent('''
    import os, signal, sys, time
    from pathlib import Path
    import chimera_nb.checkpoint as ck
    real = ck.atomic_write
    def atomic_write(path, write):   # in rank 1, in the middle of step 2's save: Ctrl-C twice, 50 ms apart, at the launcher
        p = Path(path)
        if p.parent.name == '.partial_step_00000002' and p.name == 'rank00001.json':
            os.kill(os.getppid(), signal.SIGINT); time.sleep(0.05); os.kill(os.getppid(), signal.SIGINT); time.sleep(60)
        return real(path, write)
    ck.atomic_write = atomic_write
    from chimera_nb.cli import main
    sys.exit(main(sys.argv[1:]))''')


def _sealed_whole(ck: Path, cfg) -> list:
    "Every step folder verifies; the steps, newest first."
    steps = sorted(ck.glob('step_*'), reverse=True)
    for d in steps: assert verify_checkpoint(d, 2, _schedule(cfg)) is None, d
    return [int(d.name[5:]) for d in steps]


def _interrupt_a_save(tmp_path):
    "Ctrl-C twice at the launcher in the middle of step 2's save (checkpoints every step): the command's config and folder."
    ck = tmp_path / 'ck'
    args = ['train', *CLI, '--steps', 4, '--checkpoint-dir', ck, '--checkpoint-every', 1]
    p = subprocess.Popen([sys.executable, '-c', _INTERRUPT_SAVE, *map(str, args)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = p.communicate(timeout=120)
    assert p.returncode == 130, err[-3000:]
    _one_line_error(err, 'stopped at once by a second SIGINT', 'are intact: run again with --resume')
    cfg = parse_config([*map(str, CLI), '--steps', '4', '--checkpoint-dir', str(ck), '--checkpoint-every', '1'])   # the command's run
    assert _sealed_whole(ck, cfg) == [1]                           # step 2 was cut off: never sealed, never a step folder
    best, skipped = latest_checkpoint(cfg, 2, _schedule(cfg))
    assert best.name == 'step_00000001' and skipped == []           # its partial folder is not read
    assert (ck / '.partial_step_00000002').is_dir()
    from chimera_nb.train import _holding   # the killed run's lock went with it
    with _holding(cfg, check=False): pass
    return ck, cfg


def test_a_second_ctrl_c_during_a_save_stops_at_once_and_keeps_the_sealed_checkpoint(tmp_path):
    _interrupt_a_save(tmp_path)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_second_ctrl_c_during_a_save_then_resume_loads_the_sealed_checkpoint(tmp_path):
    ck, cfg = _interrupt_a_save(tmp_path)
    res = train(cfg.replace(resume=True))                          # the newest sealed checkpoint loads; the next save clears the partial
    assert [s for s, _ in res.losses] == [1, 2, 3] and not list(ck.glob('.partial_*')) and _sealed_whole(ck, cfg)[0] == 4


def _ctrl_c_twice_while_training(tmp_path, steps):
    m, ck = tmp_path / 'm.jsonl', tmp_path / 'ck'
    p = _cli(*CLI, '--steps', steps, '--checkpoint-dir', ck, '--checkpoint-every', 1, '--metrics', m)
    deadline = time.monotonic() + 100
    while time.monotonic() < deadline and p.poll() is None and not (m.exists() and m.read_text().count('"loss"') >= 3): time.sleep(0.05)
    p.send_signal(signal.SIGINT); time.sleep(0.05); p.send_signal(signal.SIGINT)   # a terminal's Ctrl-C reaches the launcher
    out, err = p.communicate(timeout=60)
    assert p.returncode == 130, err[-3000:]
    _one_line_error(err, 'stopped at once by a second SIGINT')
    return m, ck


def test_a_second_ctrl_c_while_training_leaves_every_sealed_checkpoint_whole(tmp_path):
    m, ck = _ctrl_c_twice_while_training(tmp_path, 300)
    steps = _sealed_whole(ck, parse_config([*map(str, CLI)]))
    assert steps and steps[0] >= 2, steps


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_second_ctrl_c_while_training_then_resume_continues_from_the_newest(tmp_path):
    m, ck = _ctrl_c_twice_while_training(tmp_path, 40)
    newest = _sealed_whole(ck, parse_config([*map(str, CLI)]))[0]
    p = _cli(*CLI, '--steps', 40, '--checkpoint-dir', ck, '--checkpoint-every', 1, '--metrics', m, '--resume')
    out, err = p.communicate(timeout=200)
    assert p.returncode == 0 and f'resumed from step {newest} ' in out, (out[-2000:], err[-2000:])


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_two_commands_at_once_into_one_folder(tmp_path):
    "A real run holds the folder; a second chimera-train into it is refused in one line naming the first's pid; the first goes on."
    ck = tmp_path / 'ck'
    first = _cli(*CLI, '--steps', 400, '--checkpoint-dir', ck, '--metrics', tmp_path / 'a.jsonl')
    try:
        deadline = time.monotonic() + 100
        while time.monotonic() < deadline and not ((ck / 'lock').exists() and (ck / 'lock').read_text()): time.sleep(0.05)
        second = _cli(*CLI, '--steps', 400, '--checkpoint-dir', ck, '--metrics', tmp_path / 'b.jsonl')
        out, err = second.communicate(timeout=120)
        assert second.returncode == 2, err[-2000:]
        _one_line_error(err, f"is in use by another run (pid {first.pid} on ")
        assert first.poll() is None
    finally:
        first.send_signal(signal.SIGTERM); first.communicate(timeout=120)
    assert first.returncode == 75
