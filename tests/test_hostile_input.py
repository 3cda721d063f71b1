"""Hostile and careless input (issue 35, classes 5-7): every user file goes through one bounded reader (files.read_bounded,
files.parse_dict), so FIFOs, devices, symlinks to them, huge, deeply nested, alias-bombed or oddly typed files end at
once in one line naming the file and the fix; profiles load back (calibrated ones too) or say why in one ValueError;
the left-overs (estimate_profile's seq_len=0, a negative all-reduce size, `python -m chimera_nb.infer`) say so.
The search's and the tuner's limits are in tests/test_search.py.

Run: .venv/bin/python -m pytest tests/test_hostile_input.py -q
"""
import json, math, os, subprocess, sys, time
import pytest
from hypothesis import given, settings, strategies as st, HealthCheck
from tiers import examples   # the Hypothesis profile: fewer examples in make test, all in make test-all
from chimera_nb.checks import SpecError
from chimera_nb.files import load_dict, parse_dict, read_bounded
from chimera_nb.spec import PipelineSpec, TrainConfig, DTYPES
from chimera_nb.cli import parse_config, read_order, train_main, main
from chimera_nb.schedules import make_schedule

FAST = settings(max_examples=examples(150), deadline=None, suppress_health_check=list(HealthCheck))
LAUGHS = 'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n' + ''.join(
    f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 9)}]\n" for i in range(8))


def _one_line(e, *words, path=None, limit=400):
    "One line under `limit` characters, not counting the user's own `path` (a long folder name is no longer a message)."
    text = str(e).replace(str(path), '') if path is not None else str(e)
    assert isinstance(e, SpecError) and str(e) and '\n' not in str(e) and len(text) < limit, repr(e)
    for w in words: assert w in str(e), (w, str(e))


def _refused(f, *words):
    "f() raises one SpecError line holding `words` (a refusal that hangs instead is stopped by the test's timeout)."
    with pytest.raises(SpecError) as e: f()
    _one_line(e.value, *words)


# --- the reader: any text, any file, one line ---

plain = st.recursive(st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=8)),
                     lambda kids: st.one_of(st.lists(kids, max_size=4), st.dictionaries(st.text(max_size=6), kids, max_size=4)),
                     max_leaves=20)


@FAST
@given(st.sampled_from(['toml', 'json', 'yaml']), st.one_of(st.text(max_size=200), plain.map(json.dumps),
                                                            st.text(alphabet='[]{}:,&*!- \n"\'a1.', max_size=300)))
def test_any_text_is_plain_data_or_one_line(fmt, text):
    try: d = parse_dict(text, fmt, 'config file x')
    except SpecError as e: return _one_line(e, 'config file x')
    assert isinstance(d, dict) and all(isinstance(k, str) for k in d)
    json.dumps(d, allow_nan=True)   # plain data: tables, lists, text, numbers, booleans, null (TOML/YAML dates refused)


@FAST
@given(st.dictionaries(st.text(max_size=8), plain, max_size=6))
def test_plain_tables_read_back_from_json_and_yaml(d):
    import yaml
    assert parse_dict(json.dumps(d), 'json', 'x') == d
    try: back = parse_dict(yaml.safe_dump(d), 'yaml', 'x')
    except SpecError as e: return _one_line(e)   # YAML 1.1 reads some keys as numbers or booleans ('1', 'on'): refused, not mixed
    assert back == d


@settings(max_examples=examples(60), deadline=None, suppress_health_check=list(HealthCheck))
@given(suffix=st.sampled_from(['.toml', '.json', '.yaml', '.yml']), data=st.binary(max_size=300))
def test_any_bytes_in_a_config_file_load_or_are_refused(suffix, data, tmp_path_factory):
    p = tmp_path_factory.mktemp('cfg') / f'run{suffix}'
    p.write_bytes(data)
    try: TrainConfig.load(p)
    except SpecError as e: _one_line(e, path=p, limit=500)   # an unknown key's message lists every key a config takes (347 characters)


@settings(max_examples=examples(60), deadline=None, suppress_health_check=list(HealthCheck))
@given(suffix=st.sampled_from(['.txt', '.csv']), data=st.one_of(st.binary(max_size=200), st.text(alphabet='FBW0123.du \n,#=rankDN', max_size=200).map(str.encode)))
def test_any_bytes_in_a_schedule_or_spec_file_load_or_are_refused(suffix, data, tmp_path_factory):
    d = tmp_path_factory.mktemp('sched')
    (d / f'order{suffix}').write_bytes(data); (d / 'spec.toml').write_bytes(data)
    try: r = read_order(d / f'order{suffix}')
    except SpecError as e: _one_line(e, 'schedule file')
    else: assert r['schedule'] == 'custom' and r['D'] >= 1 and r['N'] >= 1
    try: PipelineSpec.load(d / 'spec.toml')
    except SpecError as e: _one_line(e)


def test_every_kind_of_file_that_hung_or_exhausted_memory_is_refused_at_once(tmp_path):
    os.mkfifo(tmp_path / 'fifo.toml'); os.symlink('/dev/zero', tmp_path / 'zero.json'); (tmp_path / 'dir.yaml').mkdir()
    os.symlink(tmp_path / 'fifo.toml', tmp_path / 'link.toml')   # a symlink to a FIFO: what it points at counts
    (tmp_path / 'big.json').write_text('{"D": 4, "x": "' + 'a' * (2 << 20) + '"}')
    (tmp_path / 'laughs.yaml').write_text(LAUGHS)
    (tmp_path / 'deep.json').write_text('[' * 200_000 + ']' * 200_000)
    (tmp_path / 'list.json').write_text('[1, 2]')
    (tmp_path / 'mixed.yaml').write_text('1: a\nD: 2\n')
    (tmp_path / 'digits.yaml').write_text('D: ' + '9' * 5000 + '\n')
    (tmp_path / 'digits.json').write_text('{"D": ' + '9' * 4000 + '}')
    (tmp_path / 'name.yaml').write_text('data: ' + 'x' * 5000 + '\n')
    (tmp_path / 'date.yaml').write_text('data: 2024-01-02\n')
    for name, words in (('fifo.toml', ['FIFO']), ('zero.json', ['is a device']), ('dir.yaml', ['is a folder']), ('link.toml', ['FIFO']),
                        ('big.json', ['over the 1,048,576']), ('laughs.yaml', ['anchor or alias']), ('deep.json', ['nested too deeply']),
                        ('list.json', ['holds a list']), ('mixed.yaml', ['key 1 is not a name']), ('digits.yaml', ['over 4,300 digits']),
                        ('digits.json', ['D must be <= 4096, got a 4000-digit integer']), ('name.yaml', ['data is 5,000 bytes long']),
                        ('date.yaml', ['data is a date'])):
        for load in (TrainConfig.load, lambda p: parse_config(['--config', str(p)])):
            _refused(lambda: load(tmp_path / name), *words)
        if name not in ('digits.json', 'name.yaml'): _refused(lambda: PipelineSpec.load(tmp_path / name), 'spec file', *words)


@pytest.mark.timeout(60)
def test_a_schedule_file_that_is_a_fifo_or_dev_zero_is_refused(tmp_path):
    os.mkfifo(tmp_path / 'order.txt'); os.symlink('/dev/zero', tmp_path / 'zero.csv')
    _refused(lambda: read_order(tmp_path / 'order.txt'), "schedule file", 'FIFO (named pipe)')
    _refused(lambda: parse_config(['--schedule-file', str(tmp_path / 'zero.csv')]), 'is a device')
    (tmp_path / 'big.txt').write_text('F0.d0 ' * (12 << 20))   # 72 MiB of text: over the limit, not read
    _refused(lambda: read_order(tmp_path / 'big.txt'), 'over the 67,108,864')
    (tmp_path / 'ok.txt').write_text(make_schedule('1f1b', 2, 4).to_text())
    assert read_order(tmp_path / 'ok.txt')['N'] == 4


@pytest.mark.timeout(60)
def test_a_model_folder_whose_config_json_is_a_fifo_or_dev_zero(tmp_path):
    from chimera_nb.models import family_of
    for kind in ('fifo', 'zero', 'deep'):
        d = tmp_path / kind; d.mkdir()
        if kind == 'fifo': os.mkfifo(d / 'config.json')
        elif kind == 'zero': os.symlink('/dev/zero', d / 'config.json')
        else: (d / 'config.json').write_text('{"model_type": ' + '[' * 50_000 + ']' * 50_000 + '}')
        why = {'fifo': 'FIFO', 'zero': 'is a device', 'deep': 'nested too deeply'}[kind]
        _refused(lambda: PipelineSpec(model=str(d)), 'model config', why)   # the spec's check of a model folder
        _refused(lambda: family_of(str(d)), 'model config', why)             # models.build's


def test_the_command_line_says_one_line_for_a_long_data_name(capsys):
    assert train_main(['--data', 'x' * 5000]) == 2
    err = capsys.readouterr().err
    assert err.count('\n') == 1 and 'data is 5,000 bytes long' in err and len(err) < 300


def test_read_bounded_reads_regular_files_and_links_to_them(tmp_path):
    (tmp_path / 'a.toml').write_text('D = 2')
    os.symlink(tmp_path / 'a.toml', tmp_path / 'b.toml')
    assert read_bounded(tmp_path / 'b.toml') == 'D = 2' and load_dict(tmp_path / 'b.toml') == dict(D=2)
    _refused(lambda: read_bounded(tmp_path / 'a.toml', max_bytes=3), 'over the 3 bytes')


# --- profiles: any JSON loads or says why in one ValueError; calibrated ones round-trip ---

from chimera_nb.profile import Profile, LayerProfile, estimate_profile
from chimera_nb.hardware import HARDWARE

_junk = st.one_of(st.integers(-5, 10**9), st.floats(allow_nan=True), st.text(max_size=3), st.none(), st.booleans(),
                  st.lists(st.integers(0, 3), max_size=2), st.dictionaries(st.text(max_size=2), st.integers(), max_size=2))
_layer = st.one_of(st.fixed_dictionaries({k: _junk for k in LayerProfile._fields}), _junk,
                   st.lists(st.floats(0, 10), min_size=9, max_size=11))


@settings(max_examples=examples(300), deadline=None, suppress_health_check=list(HealthCheck))
@given(st.dictionaries(st.sampled_from([f.name for f in Profile.__dataclass_fields__.values()] + ['junk']),
                       st.one_of(_junk, st.lists(_layer, max_size=3), st.lists(st.tuples(st.lists(_junk, max_size=2), _junk), max_size=2))))
def test_any_profile_json_loads_or_is_one_value_error(d):
    "Wrongly typed fields (a string for a size, a number for a layer, a bool for the links) raise one ValueError, never TypeError."
    base = dict(model='m', micro_batch_size=1, seq_len=0, dtype='float32', layers=[dict(name='l', params=1, param_bytes=4, forward_s=1.0,
                backward_s=2.0, saved_bytes=0, in_bytes=0, out_bytes=0)])
    try: p = Profile.from_json(json.dumps({**base, **d}))
    except ValueError as e: assert '\n' not in str(e) and len(str(e)) < 400, str(e)
    else:
        assert Profile.from_json(p.to_json()) == p
        assert p.dtype in DTYPES and p.micro_batch_size <= 1 << 20 and max(p.ar_alpha, p.ar_beta, p.p2p_latency) <= 60, p   # in range
        assert all(0 <= l.w_keep <= 1 for l in p.layers) and isinstance(p.machine.get('gpu', ''), str), p


_history_key = st.sampled_from(['profile', 'error', 'predicted_step_s', 'measured_step_s', 'stage_error', 'date', 'label'])

@settings(max_examples=examples(150), deadline=None, suppress_health_check=list(HealthCheck))
@given(lines=st.lists(st.one_of(st.text(max_size=40), st.dictionaries(_history_key, _junk, max_size=7).map(json.dumps),
                          st.dictionaries(_history_key, st.one_of(st.text(max_size=3), st.floats(-2, 2)), max_size=7).map(json.dumps)), max_size=8))
def test_any_history_line_is_a_run_or_skipped_and_counted(lines, tmp_path_factory):
    "`chimera-slurm history` over any lines: a run's record counts, anything else is skipped and counted; never a traceback, never NaN or inf."
    from chimera_nb.report import prediction_history
    d = tmp_path_factory.mktemp('history'); text = '\n'.join(lines) + '\n'
    (d / 'history.jsonl').write_text(text)
    runs, per = prediction_history(d), prediction_history(d, by_profile=True)
    assert all(isinstance(v, (int, float)) and math.isfinite(v) for v in runs.error) and all(isinstance(v, str) for v in runs.profile)
    assert len(runs) + runs.attrs['skipped'] == sum(1 for l in text.splitlines() if l.strip()) and per.runs.sum() == len(runs)


@settings(max_examples=examples(25), deadline=None, suppress_health_check=list(HealthCheck))
@given(name=st.sampled_from(['1f1b', 'gpipe', 'chimera', 'zb-h1', 'interleaved-1f1b']), D=st.sampled_from([2, 4]),
       times=st.lists(st.floats(0.001, 1.0), min_size=8, max_size=8), dp=st.sampled_from([1, 2]), sync=st.sampled_from(['end', 'eager']))
def test_a_calibrated_profile_loads_back_equal(name, D, times, dp, sync, tmp_path_factory):
    from chimera_nb.perf_model import calibrate, predicted_costs
    from chimera_nb.program import lower
    from chimera_nb.simulate import Costs, simulate
    prof = estimate_profile('bert-tiny', HARDWARE['p100-daint'], 2)
    s = make_schedule(name, D, 2 * D)
    if s.num_stages > len(prof.layers): return
    S = s.num_stages
    tl = simulate(lower(s, sync, dp), Costs(times[:S] * (S // len(times[:S]) or 1), [2 * t for t in times[:S]]))
    cal = calibrate(prof, tl, s, dp=dp, sync=sync)
    p = tmp_path_factory.mktemp('cal') / 'cal.json'
    cal.save(p)
    back = Profile.load(p, model='bert-tiny')
    assert back == cal and back.to_json() == cal.to_json() and back.source.startswith('calibrated from')
    assert predicted_costs(back, s, dp) == predicted_costs(cal, s, dp)


@pytest.mark.timeout(60)
def test_a_profile_file_that_is_a_fifo_or_dev_zero(tmp_path):
    os.mkfifo(tmp_path / 'p.json'); os.symlink('/dev/zero', tmp_path / 'z.json')
    _refused(lambda: Profile.load(tmp_path / 'p.json'), 'FIFO')
    _refused(lambda: Profile.load(tmp_path / 'z.json'), 'is a device')
    from chimera_nb.perf_model import predict_spec   # a spec's hardware may be a saved profile: read the same way
    _refused(lambda: predict_spec(PipelineSpec(model='bert-tiny', hardware=str(tmp_path / 'z.json'))), 'is a device')


# --- left from before ---

def test_estimate_profile_refuses_seq_len_zero():
    with pytest.raises(ValueError, match='seq_len must be >= 2, got 0'): estimate_profile('bert-48', HARDWARE['l4'], 1, seq_len=0)
    assert estimate_profile('bert-48', HARDWARE['l4'], 1).seq_len == 128   # None: the preset's


@settings(max_examples=examples(100), deadline=None)
@given(st.integers(1, 1024), st.floats(-1e12, 1e12), st.floats(0, 1e-3), st.floats(0, 1e-9))
def test_allreduce_time_is_never_negative(r, nbytes, alpha, beta):
    from chimera_nb.perf_model import allreduce_time
    try: t = allreduce_time(r, nbytes, alpha, beta)
    except ValueError as e: assert nbytes < 0 and "nbytes must be >= 0" in str(e)
    else: assert nbytes >= 0 and t >= 0


def test_python_m_infer_says_how_to_run_it():
    env = {k: v for k, v in os.environ.items() if k not in ('RANK', 'WORLD_SIZE', 'SLURM_PROCID')}
    out = subprocess.run([sys.executable, '-m', 'chimera_nb.infer'], capture_output=True, text=True, timeout=120, env=env)
    assert out.returncode == 2 and 'Traceback' not in out.stderr and out.stderr.count('\n') == 1, out.stderr
    assert 'chimera-nb infer --local' in out.stderr and 'torchrun or srun' in out.stderr


def test_chimera_nb_infer_without_a_launcher_says_how(capsys, monkeypatch):
    for k in ('RANK', 'WORLD_SIZE', 'SLURM_PROCID'): monkeypatch.delenv(k, raising=False)
    assert main(['infer']) == 2
    err = capsys.readouterr().err
    assert err.count('\n') == 1 and 'add --local' in err and 'Traceback' not in err


_config_key = st.sampled_from(['num_hidden_layers', 'hidden_size', 'num_attention_heads', 'num_key_value_heads', 'head_dim', 'intermediate_size',
                               'vocab_size', 'max_position_embeddings', 'rope_theta', 'rope_scaling', 'tie_word_embeddings', 'layer_types',
                               'sliding_window', 'attention_bias'])
_config_value = st.one_of(_junk, st.integers(-3, 70), st.sampled_from([{'rope_type': 'yarn'}, {'rope_type': 'linear', 'factor': 2.0},
                                                                           {'type': 'dynamic', 'factor': 0}, ['full_attention'] * 2, 'false']))


@settings(max_examples=examples(200), deadline=None, suppress_health_check=list(HealthCheck))
@given(change=st.dictionaries(_config_key, _config_value, max_size=4))
def test_any_model_config_is_refused_where_the_spec_is_made_or_builds(change, tmp_path_factory):
    "A saved Llama folder's config.json with any values: the spec refuses it in one line, or the model builds (its shapes, on the meta device)."
    from chimera_nb.models import build
    d = tmp_path_factory.mktemp('model')
    base = dict(model_type='llama', num_hidden_layers=2, hidden_size=64, num_attention_heads=4, num_key_value_heads=2, intermediate_size=128,
                vocab_size=1000, max_position_embeddings=256)
    (d / 'config.json').write_text(json.dumps({**base, **change}))
    try: PipelineSpec(model=str(d), D=2, seq_len=8)
    except (SpecError, ValueError) as e: assert '\n' not in str(e) and len(str(e)) < 400, str(e); return
    assert len(build({**base, **change}, device='meta').layers) >= 3   # accepted: transformers builds its shapes (no ZeroDivisionError, KeyError, ...)
