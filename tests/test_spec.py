"""PipelineSpec and TrainConfig under hypothesis: every value either makes a spec or is refused with one SpecError line
naming the field; every spec round-trips through dict, JSON and TOML with the same key; chimera-train's parser never
raises anything but a SpecError (or argparse's exit 2), and answers --help without importing torch."""
import json, math, subprocess, sys, tomllib
import pytest
from hypothesis import given, settings, strategies as st, HealthCheck
from tiers import examples   # the Hypothesis profile: fewer examples in make test, all in make test-all
from chimera_nb.spec import PipelineSpec, TrainConfig, DTYPES
from chimera_nb.cli import parse_config
from chimera_nb.catalog import PRESETS
from chimera_nb.checks import SpecError
from chimera_nb.schedules import SCHEDULES, CHIMERA_CONCAT

SPEC_FIELDS = {f: None for f in PipelineSpec.__dataclass_fields__}
anything = st.one_of(st.none(), st.booleans(), st.integers(-10, 10**6), st.floats(allow_nan=True, allow_infinity=True),
                     st.text(max_size=12), st.sampled_from(list(PRESETS) + list(SCHEDULES) + list(DTYPES) + list(CHIMERA_CONCAT)))
valid = st.builds(dict, model=st.sampled_from(['bert-48', 'gpt2-64', 'bert-large', 'gpt2-small']),
                  dtype=st.sampled_from(DTYPES), W=st.integers(1, 64), D=st.sampled_from([1, 2, 4, 8]),
                  B=st.sampled_from([1, 2, 4, 8]), N=st.sampled_from([8, 16, 32]), schedule=st.sampled_from(list(SCHEDULES)),
                  pipes=st.sampled_from([2, 4]), concat=st.sampled_from(CHIMERA_CONCAT), chunks=st.sampled_from([1, 2, 4]),
                  recompute=st.booleans(), sync=st.sampled_from(['auto', 'eager', 'eager-opt', 'end']))


def _one_line(e):
    assert isinstance(e, SpecError) and '\n' not in str(e) and str(e), repr(e)


@settings(max_examples=examples(300), deadline=None, suppress_health_check=list(HealthCheck))
@given(field=st.sampled_from(list(SPEC_FIELDS)), value=anything)
def test_any_field_value_makes_a_spec_or_one_line(field, value):
    try: s = PipelineSpec(**{field: value})
    except SpecError as e:
        _one_line(e)
        named = field in str(e) or repr(value) in str(e) or str(value) in str(e) or field in ('schedule', 'N', 'D', 'pipes', 'concat', 'chunks')
        assert named, (field, value, str(e))
    else:
        assert PipelineSpec.from_dict(s.to_dict()) == s


@settings(max_examples=examples(200), deadline=None, suppress_health_check=list(HealthCheck))
@given(valid)
def test_valid_specs_round_trip_with_the_same_key(kw):
    try: s = PipelineSpec(**kw)
    except SpecError as e: return _one_line(e)   # e.g. N not a multiple of D for Chimera
    for back in (PipelineSpec.from_dict(json.loads(s.to_json())), PipelineSpec.from_toml(s.to_toml()), s.replace()):
        assert back == s and back.key() == s.key()
    assert s.make().num_ranks == s.D and s.world_size == s.W * s.D and s.global_batch == s.W * s.N * s.B


@settings(max_examples=examples(150), deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(st.one_of(st.sampled_from(['-D', '-N', '-W', '-B', '--model', '--schedule', '--dtype', '--seq-len', '--lr', '--steps',
                                           '--timeout', '--seed', '--spec', '--config', '--recompute', '--no-progress', '--data',
                                           '--clip-grad', '--dropout', '--sync', '--hardware']),
                          st.sampled_from(['0', '-1', '3', '4', '8', 'nan', 'inf', '1e30', 'bogus', '', 'x.toml', 'bert-48', 'chimera'])),
                max_size=8))
def test_the_parser_refuses_in_one_line(argv):
    try: cfg = parse_config(argv)
    except SpecError as e: _one_line(e)
    except SystemExit as e: assert e.code == 2   # argparse: a flag without its value, a non-number
    else:
        assert isinstance(cfg, TrainConfig) and math.isfinite(cfg.lr) and cfg.timeout > 0


def test_help_is_quick_and_imports_no_torch():
    code = "import sys; from chimera_nb.cli import config_parser; config_parser().format_help(); print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == 'False', out.stderr
    helps = [a.help for a in config_parser_actions() if a.dest not in ('help',)]
    assert all(h and len(h) > 8 for h in helps), helps


def config_parser_actions():
    from chimera_nb.cli import config_parser
    return [a for a in config_parser()._actions if a.option_strings and not a.option_strings[0].startswith('--no-')]


def test_a_config_file_with_flat_or_nested_spec_keys(tmp_path):
    (tmp_path / 'flat.toml').write_text('model = "gpt2-tiny"\nschedule = "1f1b"\nD = 2\nsteps = 3\n')
    (tmp_path / 'nested.toml').write_text('steps = 3\n[spec]\nmodel = "gpt2-tiny"\nschedule = "1f1b"\nD = 2\n')
    (tmp_path / 'run.yaml').write_text('steps: 3\nspec:\n  model: gpt2-tiny\n  schedule: 1f1b\n  D: 2\n')
    a, b, c = (parse_config(['--config', str(tmp_path / n)]) for n in ('flat.toml', 'nested.toml', 'run.yaml'))
    assert a == b == c and a.spec.seq_len == 32 and a.steps == 3
    (tmp_path / 'bad.toml').write_text('stages = 4\n')
    with pytest.raises(SpecError, match=r"unknown keys \['stages'\]"): parse_config(['--config', str(tmp_path / 'bad.toml')])
    (tmp_path / 'broken.toml').write_text('D = \n')
    with pytest.raises(SpecError, match='not valid TOML'): parse_config(['--config', str(tmp_path / 'broken.toml')])


TRAIN_FIELDS = [f for f in TrainConfig.__dataclass_fields__ if f != 'spec']


@settings(max_examples=examples(300), deadline=None, suppress_health_check=list(HealthCheck))
@given(field=st.sampled_from(TRAIN_FIELDS + list(SPEC_FIELDS)), value=anything)
def test_any_config_key_loads_or_is_refused_in_one_line(field, value, tmp_path_factory):
    "A config file's key with any value (as TOML, JSON or YAML could hold it): a run, or one SpecError line."
    try: cfg = TrainConfig.from_dict({field: value})
    except SpecError as e: return _one_line(e)
    assert TrainConfig.from_dict(cfg.to_dict()) == cfg
    text = cfg.to_toml()                      # what a SLURM job writes: it reads back the same run
    assert TrainConfig.from_dict(tomllib.loads(text)) == cfg
