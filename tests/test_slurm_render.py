"""Injection safety of the rendered batch script (no SLURM needed): every user value is refused with what is allowed, or
lands in the script so that bash parses it (`bash -n`), no #SBATCH line is split or added, and running the script with
stub `srun`/`scontrol`/`module` commands creates no sentinel file and hands the value to srun (or the environment)
byte for byte. Strings: hypothesis text mixed with spaces, quotes, $(), backticks, newlines, semicolons, pipes."""
import dataclasses, json, os, re, subprocess
from pathlib import Path
import pytest
from hypothesis import given, settings, strategies as st, HealthCheck
from tiers import examples   # the Hypothesis profile: fewer examples in make test, all in make test-all
from chimera_nb.spec import TrainConfig, PipelineSpec
from chimera_nb.checks import SpecError


def TC(**kw) -> TrainConfig:
    "A run from flat keys (the spec's and training's, as a config file may hold them)."
    return TrainConfig.from_dict(kw)


from chimera_nb.slurm import SlurmJob, render, check_job, time_seconds, slurm_time, preset, CLUSTER_PRESETS, run_toml

SENT = '/tmp/chimera_slurm_pwned'
NASTY = [f'$(touch {SENT})', f'`touch {SENT}`', f'; touch {SENT}', f'\ntouch {SENT}\n', f"' ; touch {SENT}; '",
         f'" ; touch {SENT}; "', '${IFS}', f'&& touch {SENT}', f'| touch {SENT}', ' ', '\\', '%j', '#SBATCH --wrap=x',
         '\r', f'\n#SBATCH --wrap=touch {SENT}\n', "'", '"', '$HOME', '*', '~', '--x=y', 'a-b_c.d']
nasty = st.lists(st.one_of(st.sampled_from(NASTY), st.text(max_size=6)), min_size=1, max_size=4).map(''.join)
BASE = TC(model='bert-tiny', D=2, steps=3)

STUBS = {'srun': 'printf "%s\\0" "$@" > "$STUB_OUT/srun.args"; env -0 > "$STUB_OUT/srun.env"; exit 0',
         'scontrol': 'echo localhost', 'module': 'exit 0'}


@pytest.fixture(scope='module')
def stubs(tmp_path_factory):
    d = tmp_path_factory.mktemp('stubs')
    for name, body in STUBS.items():
        (d / name).write_text('#!/bin/bash\n' + body + '\n'); (d / name).chmod(0o755)
    return d


def _accepted(job):
    try: return render(job)
    except (ValueError, TypeError) as e:
        assert 'allowed' in str(e) or 'must' in str(e) or 'use' in str(e) or 'unknown' in str(e), str(e)
        return None


def _structure_ok(script, job):
    assert subprocess.run(['bash', '-n'], input=script, text=True, capture_output=True).returncode == 0, script
    head = script.split('set -euo pipefail')[0].splitlines()
    assert all(l.startswith('#') for l in head), head  # no command before the environment block
    sb = [l for l in head if l.startswith('#SBATCH')]
    assert all(re.fullmatch(r'#SBATCH --[a-z-]+(=\S+)?', l) for l in sb), sb
    assert not any('--wrap' in l for l in sb)


def _run(script, stubs, tmp):
    out = tmp / 'stub'; out.mkdir(exist_ok=True)
    if os.path.exists(SENT): os.remove(SENT)
    env = dict(PATH=f"{stubs}:/usr/bin:/bin", STUB_OUT=str(out), SLURM_JOB_ID='123', SLURM_JOB_NODELIST='n1', HOME=str(tmp))
    p = subprocess.run(['bash', '-s'], input=script, text=True, capture_output=True, env=env, cwd=tmp, timeout=20)
    assert not os.path.exists(SENT), f"injected command ran:\n{script}"
    args = (out / 'srun.args').read_bytes().decode().split('\0')[:-1]
    envs = dict(kv.split('=', 1) for kv in (out / 'srun.env').read_bytes().decode().split('\0') if '=' in kv)
    return p, args, envs


@settings(max_examples=examples(60), deadline=None, suppress_health_check=list(HealthCheck))
@given(field=st.sampled_from(['name', 'partition', 'account', 'qos', 'gpu_type', 'mem', 'run_dir', 'python', 'time']), value=nasty)
def test_resource_fields_refused_or_inert(field, value):
    job = SlurmJob(BASE, **{'run_dir': '/tmp/chimera-render-test', field: value})
    if (s := _accepted(job)) is not None: _structure_ok(s, job)


@settings(max_examples=examples(40), deadline=None, suppress_health_check=list(HealthCheck))
@given(value=nasty)
def test_modules_and_extra_options_refused_or_inert(value):
    for job in (SlurmJob(BASE, modules=('cuda', value)), SlurmJob(BASE, extra=(value,))):
        if (s := _accepted(job)) is not None: _structure_ok(s, job)


@settings(max_examples=examples(60), deadline=None, suppress_health_check=list(HealthCheck))
@given(value=nasty.filter(lambda v: '\n' not in v and '\0' not in v), key=st.sampled_from(['MY_VAR', 'HF_HOME']))
def test_env_values_and_train_strings_arrive_intact(value, key, stubs, tmp_path_factory):
    tmp = tmp_path_factory.mktemp('run')
    try: cfg = BASE.replace(data=value)
    except ValueError as e: assert 'data must be' in str(e); return   # blank or NUL: refused by the config itself
    job = SlurmJob(cfg, run_dir=str(tmp / 'r'), env={key: value})
    try: s = render(job)  # quoted fields are never refused
    except SpecError as e:   # but a corpus path that is not there is, before anything is submitted (hypothesis found '/0')
        assert 'does not exist' in str(e) and os.path.isabs(os.path.expanduser(value)), e; return
    _structure_ok(s, job)
    p, args, envs = _run(s, stubs, tmp)
    assert p.returncode == 0, p.stderr
    i = args.index('--config'); assert TrainConfig.load(args[i + 1]) == cfg.replace(local_ranks=0)   # the run file, byte for byte
    assert envs[key] == value


def test_env_names_and_newlines_refused():
    with pytest.raises(ValueError, match='environment variable name'): render(SlurmJob(BASE, env={'A;touch x': '1'}))
    with pytest.raises(ValueError, match='one-line'): render(SlurmJob(BASE, env={'A': 'x\ntouch y'}))
    with pytest.raises(ValueError, match='no newlines'): render(SlurmJob(BASE, setup=('ok', 'a\nb')))


@settings(max_examples=examples(200), deadline=None)
@given(st.integers(1, 365 * 86400))
def test_time_round_trip(secs):
    assert time_seconds(slurm_time(secs)) == secs


@settings(max_examples=examples(200), deadline=None)
@given(st.text(max_size=14))
def test_time_parser_refuses_or_positive(t):
    try: v = time_seconds(t)
    except ValueError as e: assert 'SLURM time' in str(e) or 'more than 0' in str(e)
    else: assert v > 0


def test_every_preset_renders_and_parses(tmp_path):
    for name in CLUSTER_PRESETS:
        gpn = CLUSTER_PRESETS[name].get('gpus_per_node', 0) or 2
        job = preset(name, TC(model='bert-tiny', D=2, W=gpn, steps=3), nodes=2, run_dir=str(tmp_path / name),
                     tasks_per_node=gpn if name == 'generic' else None)
        s = render(job)
        assert subprocess.run(['bash', '-n'], input=s, text=True).returncode == 0
        if name.startswith('hpg'): assert f"#SBATCH --partition={name}" in s and '--gres=gpu:' in s


def test_run_file_round_trip(tmp_path):
    from chimera_nb.cli import parse_config
    cfg = TC(model='gpt2-tiny', schedule='1f1b', D=2, W=2, lr=3e-4, recompute=True, data='wikipedia', dropout=0.0)
    (tmp_path / 'run.toml').write_text(run_toml(cfg))
    assert parse_config(['--config', str(tmp_path / 'run.toml')]) == cfg


@settings(max_examples=examples(120), deadline=None, suppress_health_check=list(HealthCheck))
@given(job_argv=st.lists(st.sampled_from(['--preset', 'hpg-b200', 'generic', '--nodes', '0', '2', '-3', '--gpus-per-node', '8', '--time', '1:00:00',
                                 'x', '--mem', '16gb', '--run-dir', '~/r', '--name', 'a b', '--qos', 'g-b', '--env', 'A=1', 'B', '--module',
                                 'cuda/12.8', '--extra', '--exclusive', '--signal-before', '99999']), max_size=10),
       train_argv=st.lists(st.sampled_from(['-D', '3', '2', '-N', '4', '--model', 'bogus', 'bert-tiny', '--lr', 'nan', '1e-3', '--steps', '0',
                                 '--checkpoint-every', '10', '--data', '-x', 'reuters-r9', '--task', 'classify', '--seq-len', '9999']), max_size=10))
def test_chimera_slurm_flags_never_give_a_traceback(job_argv, train_argv):
    "Any chimera-slurm submit line: a script (exit 0) or one line of error (exit 1 or 2); argparse's own usage exit is 2."
    import contextlib, io
    from chimera_nb.cli import slurm_main as main
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try: rc = main(['submit', *job_argv, '--dry-run', '--', *train_argv])
        except SystemExit as e: rc = e.code
    assert rc in (0, 1, 2) and 'Traceback' not in err.getvalue(), err.getvalue()
    if rc == 0: assert out.getvalue().startswith('#!/bin/bash')
    else: assert err.getvalue().strip().count('\n') == 0, err.getvalue()   # one line, argparse's too


def _ready_script(name:str, nodes:int) -> str:
    "slurm/NAME as ready_scripts() writes it (else it is stale), parsed by bash, on hpg-b200 with 8 B200s a node and `nodes` nodes."
    from chimera_nb.slurm_scripts import ready_scripts
    text = (Path(__file__).parent.parent / 'slurm' / name).read_text()
    assert text == ready_scripts()[name], f"slurm/{name} is stale: write ready_scripts() to slurm/"
    assert subprocess.run(['bash', '-n'], input=text, text=True).returncode == 0
    assert '#SBATCH --partition=hpg-b200' in text and '#SBATCH --gres=gpu:b200:8' in text and f'#SBATCH --nodes={nodes}' in text
    return text


def test_llama3_8b_ready_script_on_hpg_b200(tmp_path):
    "slurm/llama3-8b-chimera.sbatch: the file ready_scripts() writes, bash parses it, its run.toml is the spec that fits a B200."
    from chimera_nb.perf_model import predict_spec
    from chimera_nb.hardware import HARDWARE
    text = _ready_script('llama3-8b-chimera.sbatch', nodes=1)
    s = _ready_run(text, tmp_path).spec
    assert (s.model, s.hardware, s.dtype, s.seq_len, s.schedule, s.W * s.D) == ('llama3-8b', 'b200', 'bfloat16', 4096, 'chimera', 8)
    p = predict_spec(s)
    assert 0.3 * HARDWARE['b200'].memory_bytes < p.memory_per_gpu < HARDWARE['b200'].memory_bytes, p   # fits, and is not trivially small
    _fits_its_node(text, s)   # and its node's host memory: --mem from the need, checked before any rank starts


def _ready_run(text:str, tmp_path):
    "The run file a ready script writes, parsed as chimera-train parses it."
    from chimera_nb.cli import parse_config
    (tmp_path / 'run.toml').write_text(text.split("<<'CHIMERA_RUN'\n", 1)[1].split('CHIMERA_RUN\n', 1)[0])
    return parse_config(['--config', str(tmp_path / 'run.toml')])


def _fits_its_node(text:str, spec, per_node:int=8):
    "The script's --mem holds its node's host memory by the memory model (GPUs, checkpoints), within the hpg-b200 node; its check says that need."
    import math
    from chimera_nb.memory import node_host_memory
    from chimera_nb.hardware import HARDWARE
    nm = node_host_memory(spec, per_node, gpu=True, checkpoint=True)
    mem = int(re.search(r'^#SBATCH --mem=(\d+)gb$', text, re.M).group(1)) * 2**30
    assert nm.need <= mem <= HARDWARE['b200'].host_memory_bytes, (nm.need / 2**30, mem / 2**30)
    assert f'--ranks-per-node {per_node} --device gpu --need-gpu {math.ceil(nm.need)} --keys {spec.key()} || exit $?' in text
    return nm


def test_llama3_70b_ready_script_fits_hpg_b200(tmp_path):
    "slurm/llama3-70b-chimera.sbatch: the file ready_scripts() writes; its GPU and host memory fit hpg-b200 nodes by the memory model, and the tuner ranks it."
    from chimera_nb.perf_model import predict_spec
    from chimera_nb.hardware import HARDWARE
    from chimera_nb.autotune import autotune
    s = _ready_run(text := _ready_script('llama3-70b-chimera.sbatch', nodes=4), tmp_path).spec
    assert (s.model, s.hardware, s.dtype, s.seq_len, s.W * s.D) == ('llama3-70b', 'b200', 'bfloat16', 4096, 32)
    assert predict_spec(s).memory_per_gpu <= HARDWARE['b200'].memory_bytes
    nm = _fits_its_node(text, s)
    assert nm.need > 0.25 * HARDWARE['b200'].host_memory_bytes   # not trivially small: two stages' weights and Adam state a rank, saved
    tu = autotune(32, 64, model='llama3-70b', hardware='b200', schedules=['chimera'], micro_batch_sizes=[s.B], depths=[s.D], progress=False)
    assert s in tu.specs   # among the configurations that can start, GPUs and host


def test_a_node_without_the_memory_its_ranks_need_stops_before_srun(stubs, tmp_path):
    "SLURM's --mem below the ranks' host memory: the script ends with exit 2 and one line, and srun never starts a rank; with enough, srun runs."
    s = render(SlurmJob(BASE, run_dir=str(tmp_path / 'r')))   # two CPU ranks of bert-tiny on one node
    with pytest.raises(ValueError, match=r"mem=100M cannot hold the host memory the 2 ranks of a node need \(1\.\d+ GiB.*use mem='8gb'"):
        render(SlurmJob(BASE, run_dir=str(tmp_path / 'r'), mem='100M'))   # what it asks for: refused as it is written
    out = tmp_path / 'stub'; out.mkdir()
    env = dict(PATH=f"{stubs}:/usr/bin:/bin", STUB_OUT=str(out), SLURM_JOB_ID='123', SLURM_JOB_NODELIST='n1', HOME=str(tmp_path))
    p = subprocess.run(['bash', '-s'], input=s, text=True, capture_output=True, env=dict(env, SLURM_MEM_PER_NODE='100'), cwd=tmp_path, timeout=20)
    assert p.returncode == 2 and not (out / 'srun.args').exists(), (p.returncode, p.stderr)
    assert p.stderr.count('\n') == 1 and p.stderr.startswith('chimera_nb: host memory: the 2 ranks of one node need'), p.stderr
    assert "but SLURM's --mem gives 0.0977 GiB: run fewer ranks per node" in p.stderr and '--mem=' in p.stderr, p.stderr
    p = subprocess.run(['bash', '-s'], input=s, text=True, capture_output=True, env=dict(env, SLURM_MEM_PER_NODE='16000'), cwd=tmp_path, timeout=20)
    assert p.returncode == 0 and (out / 'srun.args').exists() and 'chimera_nb: host memory: 2 ranks on this node need' in p.stdout, p.stderr
