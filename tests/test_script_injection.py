"""Command injection into the job script (issue 35, item 1). Every string of a `SlurmJob` or its `TrainConfig` that reaches
job.sh — the model's hub name or folder, the job's name and resources, modules, env names and values, extra sbatch options,
notes, the run's own strings — is either refused with a one-line error naming the field, or lands in a script that
`bash -n` parses, that RUNS (stub srun, scontrol, sbatch, module and python first on PATH, logging their arguments)
without running anything injected, and whose run.toml reads back (tomllib) as exactly the TrainConfig rendered.
Strings: hypothesis text mixed with newlines, quotes, $(), backticks, ;, the here-document's delimiter, NUL, controls, unicode."""
import dataclasses, json, os, re, string, subprocess, tempfile, tomllib
from pathlib import Path
import pytest
from hypothesis import given, settings, strategies as st, HealthCheck, assume, event
from tiers import examples   # the Hypothesis profile: fewer examples in make test, all in make test-all
from hypothesis.control import currently_in_test_context
from chimera_nb.spec import PipelineSpec, TrainConfig
from chimera_nb.slurm import SlurmJob, render

MARK = '/tmp/chimera_script_injection_marker'   # what an injected command creates (and, relative to the job's folder, PWNED)
INJECT = [f'$(touch {MARK})', f'`touch {MARK}`', f'; touch {MARK}', f'\ntouch {MARK}\n', f'\nCHIMERA_RUN\ntouch {MARK}\n#',
          f"'; touch {MARK}; '", f'"; touch {MARK}; "', '$(touch PWNED)', '\ntouch PWNED\n', 'CHIMERA_RUN', '\nCHIMERA_RUN\n',
          "'", '"', '\\', '$HOME', '${IFS}', '\r', '\0', '\t', '\x0b', '\x1b[2J', '\x85', '\u2028', '\u202e', '\udcff', '#', ' ',
          'é', '中', '🙂', '%j', '\n#SBATCH --wrap=x\n', '--x=y', 'a-b_c.d', '/', '=', ',']
text = st.lists(st.one_of(st.sampled_from(INJECT), st.text(max_size=5)), min_size=1, max_size=4).map(''.join)
benign = st.text(string.ascii_letters + string.digits + '_.-+/=,@~:', min_size=1, max_size=12)   # so that many values are accepted, and run
value = st.one_of(text, benign)
FAST = settings(max_examples=examples(60), deadline=None, suppress_health_check=list(HealthCheck))
BASE = TrainConfig(PipelineSpec(model='bert-tiny', D=2, schedule='1f1b'), steps=3)
SCRIPT_SET = dict(metrics=None, checkpoint_dir=None, resume=False, local_ranks=0, progress=True)   # the script's: not in run.toml

STUB = '#!/bin/bash\nprintf "%s\\0" "$(basename "$0")" "$@" >> "$STUB_OUT/calls"\n'
STUBS = {'srun': STUB + 'printf "%s\\0" "$@" > "$STUB_OUT/srun.args"; env -0 > "$STUB_OUT/srun.env"\n',
         'scontrol': STUB + 'echo localhost\n', 'sbatch': STUB + 'echo 1\n', 'module': STUB, 'python': STUB}


@pytest.fixture(scope='module')
def stubs(tmp_path_factory):
    d = tmp_path_factory.mktemp('stubs')
    for name, body in STUBS.items(): (d / name).write_text(body); (d / name).chmod(0o755)
    return d


def _job(stubs, tmp, train=BASE, **kw) -> SlurmJob:
    "A GPU job that uses every kind of field, its Python the stub, its run folder in `tmp`."
    kw = dict(dict(run_dir=str(tmp / 'run'), python=str(stubs / 'python'), name='inj', nodes=1, gpus_per_node=2, gpu_type='l4',
                   partition='p', account='a', qos='q', mem='4gb', time='10:00', modules=('cuda/12.8',), env={'HF_HOME': '/x y'},
                   extra=('--exclusive',)), **kw)
    return SlurmJob(train, **kw)


def _event(what:str):
    "Count it in --hypothesis-show-statistics (how many examples were refused, how many rendered and run)."
    if currently_in_test_context(): event(what)


def _refused(e:Exception, *words):
    "A one-line ValueError / TypeError (SpecError is a ValueError) that names the field."
    _event('refused')
    assert isinstance(e, (ValueError, TypeError)), repr(e)
    msg = str(e)
    assert msg and '\n' not in msg and '\r' not in msg, msg
    assert any(w in msg for w in words), (words, msg)


def _structure_ok(script:str):
    "bash parses it; nothing but comments before the environment block; every #SBATCH line one option."
    p = subprocess.run(['bash', '-n'], input=script.encode(), capture_output=True)
    assert p.returncode == 0, (p.stderr, script)
    head = script.split('\nset -euo pipefail\n')[0].split('\n')
    assert all(l.startswith('#') for l in head), head
    assert all(re.fullmatch(r'#SBATCH --[a-z-]+(=\S+)?', l) for l in head if l.startswith('#SBATCH')), head
    assert not any('--wrap' in l for l in head if l.startswith('#SBATCH'))


def _run(script:str, stubs:Path, tmp:Path, task:str|None=None) -> subprocess.CompletedProcess:
    "Run the script as sbatch would (a file, bash), the stubs first on PATH; nothing injected may have run."
    marks = (Path(MARK), tmp / 'PWNED', tmp / MARK.replace('/', '_'))   # the last: MARK in a folder name, its / made _
    for m in marks: m.unlink(missing_ok=True)
    (tmp / 'job.sh').write_bytes(script.encode())   # a script that is not UTF-8 text would fail here
    (tmp / 'stub').mkdir(exist_ok=True)
    env = dict(PATH=f'{stubs}:/usr/bin:/bin', STUB_OUT=str(tmp / 'stub'), SLURM_JOB_ID='123', SLURM_JOB_NODELIST='n1', HOME=str(tmp),
               **({'SLURM_ARRAY_TASK_ID': task} if task is not None else {}))
    p = subprocess.run(['bash', str(tmp / 'job.sh')], capture_output=True, env=env, cwd=tmp, timeout=30)
    assert not any(m.exists() for m in marks), f"an injected command ran:\n{script}"
    return p


def _round_trip(out:Path, cfg:TrainConfig):
    "The run file the script wrote reads back as exactly the run rendered (less what the script sets by flags)."
    got = TrainConfig.from_dict(tomllib.loads((out / 'run.toml').read_text()))
    assert got == dataclasses.replace(cfg, **SCRIPT_SET), ((out / 'run.toml').read_text(), cfg)


def _runs_intact(script:str, job:SlurmJob, stubs:Path, tmp:Path):
    "Parsed, run to the end, srun given the job's Python and run file, the env values as given, the run file round-tripped."
    _event('rendered and run')
    _structure_ok(script)
    p = _run(script, stubs, tmp)
    assert p.returncode == 0, (p.stderr.decode(errors='replace'), script)
    args = (tmp / 'stub' / 'srun.args').read_bytes().split(b'\0')[:-1]
    run = Path(job.run_dir).absolute()
    assert [a.decode() for a in args[:6]] == [job.python, '-m', 'chimera_nb.cli', 'train', '--config', f'{run}/run.toml'], args
    envs = dict(kv.split(b'=', 1) for kv in (tmp / 'stub' / 'srun.env').read_bytes().split(b'\0') if b'=' in kv)
    for k, v in job.env.items(): assert envs[k.encode()] == v.encode(), (k, v, envs.get(k.encode()))
    _round_trip(run, job.train)


# ---- the job's own fields ----
FIELDS = {  # field: (how the drawn text becomes its value, words its error may name it by)
    'name': (lambda v, s, t: dict(name=v), ('name',)),
    'partition': (lambda v, s, t: dict(partition=v), ('partition',)),
    'account': (lambda v, s, t: dict(account=v), ('account',)),
    'qos': (lambda v, s, t: dict(qos=v), ('qos',)),
    'gpu_type': (lambda v, s, t: dict(gpu_type=v), ('gpu_type',)),
    'mem': (lambda v, s, t: dict(mem=v), ('mem',)),
    'time': (lambda v, s, t: dict(time=v), ('time',)),
    'run_dir': (lambda v, s, t: dict(run_dir=f'{t}/run-{v}'), ('run_dir',)),
    'python': (lambda v, s, t: dict(python=f'{s}/{v}'), ('python',)),
    'modules': (lambda v, s, t: dict(modules=('cuda', v)), ('module',)),
    'extra': (lambda v, s, t: dict(extra=(v,)), ('extra sbatch option',)),
    'env name': (lambda v, s, t: dict(env={v: '1'}), ('env name',)),
    'env value': (lambda v, s, t: dict(env={'MY_VAR': v, 'HF_HOME': v}), ('env MY_VAR',)),
}


@settings(max_examples=examples(100), deadline=None, suppress_health_check=list(HealthCheck))
@given(field=st.sampled_from(list(FIELDS)), value=value)
def test_job_fields_refused_or_inert(field, value, stubs):
    make, words = FIELDS[field]
    with tempfile.TemporaryDirectory() as t:
        tmp = Path(t)
        try: job = _job(stubs, tmp, **make(value, stubs, tmp)); script = render(job)
        except Exception as e: return _refused(e, *words)
        if field in ('python', 'run_dir'):   # a path given: it must stay a path in tmp (a python that is not there stops the job)
            _structure_ok(script)
            if Path(job.run_dir).resolve().is_relative_to(tmp): _run(script, stubs, tmp)
            return
        _runs_intact(script, job, stubs, tmp)


@FAST
@given(notes=st.lists(text, min_size=1, max_size=3))
def test_notes_refused_or_inert(notes, stubs):
    with tempfile.TemporaryDirectory() as t:
        tmp = Path(t)
        job = _job(stubs, tmp)
        try: script = render(job, notes=notes)
        except Exception as e: return _refused(e, 'notes')
        assert sum(l.startswith('#') for l in script.split('\n')) >= len(notes)
        _runs_intact(script, job, stubs, tmp)


# ---- the model's name: a hub name, a folder ----
@FAST
@given(name=value)
def test_hub_names_refused_or_inert(name, stubs):
    with tempfile.TemporaryDirectory() as t:
        tmp = Path(t)
        try: job = _job(stubs, tmp, train=TrainConfig(PipelineSpec(model=name, source='hub', D=2, schedule='1f1b'), steps=3), name=None)
        except Exception as e: return _refused(e, 'model')
        try: script = render(job)
        except Exception as e: return _refused(e, 'model')
        _runs_intact(script, job, stubs, tmp)


def _model_folder(parent:Path, name:str) -> Path|None:
    "A saved-BERT folder named `name` (None where the file system cannot name one so)."
    if not name or '/' in name or '\0' in name or name in ('.', '..') or len(os.fsencode(name)) > 200: return None
    f = parent / name
    try: f.mkdir()
    except OSError: return None
    (f / 'config.json').write_text(json.dumps(dict(model_type='bert', num_hidden_layers=2, max_position_embeddings=64)))
    return f


@FAST
@given(name=text)
def test_model_folders_refused_or_inert(name, stubs):
    with tempfile.TemporaryDirectory() as t:
        tmp = Path(t)
        folder = _model_folder(tmp, name.replace('/', '_'))   # a folder's name has no /
        assume(folder is not None)
        try: job = _job(stubs, tmp, train=TrainConfig(PipelineSpec(model=str(folder), source='folder', D=2, schedule='1f1b'), steps=3), name=None)
        except Exception as e: return _refused(e, 'model')
        try: script = render(job)
        except Exception as e: return _refused(e, 'model folder')
        _runs_intact(script, job, stubs, tmp)


# ---- the run's own strings: in run.toml only, and exactly ----
RUN_FIELDS = {  # TrainConfig field: how the drawn text becomes its value
    'data': lambda v: dict(data=v), 'resume_anyway': lambda v: dict(resume_anyway=v), 'hardware': lambda v: dict(hardware=v + '.json'),
    'task': lambda v: dict(task=v), 'metrics': lambda v: dict(metrics=v), 'checkpoint_dir': lambda v: dict(checkpoint_dir=v)}


@FAST
@given(field=st.sampled_from(list(RUN_FIELDS)), value=text)
def test_run_strings_refused_or_round_trip(field, value, stubs):
    with tempfile.TemporaryDirectory() as t:
        tmp = Path(t)
        try: job = _job(stubs, tmp, train=BASE.replace(**RUN_FIELDS[field](value))); script = render(job)
        except Exception as e: return _refused(e, field, 'corpus path', 'task')
        _runs_intact(script, job, stubs, tmp)


@settings(max_examples=examples(25), deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.lists(text, min_size=2, max_size=3))
def test_array_tasks_write_each_run_file_intact(data, stubs):
    with tempfile.TemporaryDirectory() as t:
        tmp = Path(t)
        try: cfgs = [BASE.replace(data=d, seed=i) for i, d in enumerate(data)]
        except Exception as e: return _refused(e, 'data')
        job = _job(stubs, tmp, train=cfgs[0])
        try: script = render(job, cfgs)
        except Exception as e: return _refused(e, 'data', 'corpus path')
        _structure_ok(script)
        for i, cfg in enumerate(cfgs):
            p = _run(script, stubs, tmp, str(i))
            assert p.returncode == 0, p.stderr
            _round_trip(tmp / 'run' / f'task-{i}', cfg)


# ---- the cases of the issue, by hand ----
def test_the_issues_injections_are_refused_with_the_fix(stubs, tmp_path):
    for name in (f'evil\ntouch {MARK}\n#', f'x\nCHIMERA_RUN\ntouch {MARK}\n', 'a(b'):
        with pytest.raises(ValueError, match=r"model \(a hub name\) .* is not allowed: use a hub name like"):
            render(_job(stubs, tmp_path, train=TrainConfig(PipelineSpec(model=name, source='hub', D=2, schedule='1f1b'))))
    folder = _model_folder(tmp_path, 'm\nCHIMERA_RUN\ntouch PWNED\n')
    with pytest.raises(ValueError, match="a control character or a byte that is not UTF-8: rename the folder"):
        render(_job(stubs, tmp_path, train=TrainConfig(PipelineSpec(model=str(folder), D=2, schedule='1f1b'))))


def test_a_folder_named_like_a_command_is_inert(stubs, tmp_path):
    folder = _model_folder(tmp_path, "m $(touch PWNED) `touch PWNED`; '\"CHIMERA_RUN 中")
    job = _job(stubs, tmp_path, train=TrainConfig(PipelineSpec(model=str(folder), D=2, schedule='1f1b'), data='x\nCHIMERA_RUN\ntouch PWNED'))
    script = render(job, notes=['a\x0bb\u2028c\x85'])
    assert '# a\\u000bb\\u2028c\\u0085' in script and "m $(touch PWNED) `touch PWNED`; '\"CHIMERA_RUN 中" in script
    _runs_intact(script, job, stubs, tmp_path)
