"""Compiled stages (`PipelineSpec.compile`, `chimera-train --compile`): each stage's blocks compiled with torch.compile
train to the same losses as eager on CPU (float tolerance), zero-bubble's split backward included; the first step,
which pays the compile, is reported once in the summary. The bert-tiny form is slow (about 10 s of compiling on this
CPU): `pytest -m slow tests/test_compile.py`."""
import json, math
import pytest
from chimera_nb.spec import PipelineSpec, TrainConfig
from chimera_nb.train import train_rank, prepare_data
from chimera_nb.comm import run_threads
from chimera_nb.cli import parse_config


def _losses(tmp_path, compile, **spec):
    "Losses and summary of 4 steps on 2 ranks (threads), dropout off."
    cfg = TrainConfig(PipelineSpec(D=2, N=2, compile=compile, **spec), steps=4, lr=3e-3, dropout=0.0, progress=False,
                      metrics=str(tmp_path / f'{compile}.jsonl'))
    res = run_threads(train_rank, 2, cfg, prepare_data(cfg))[0]
    return [l for _, l in res.losses], res.summary


def _check(tmp_path, **spec):
    eager, _ = _losses(tmp_path, None, **spec)
    compiled, summary = _losses(tmp_path, 'default', **spec)
    assert all(math.isclose(a, b, rel_tol=1e-5) for a, b in zip(eager, compiled)), (eager, compiled)
    assert summary['first_step_s'] > 0 and summary['spec']['compile'] == 'default'
    first = json.loads(open(tmp_path / 'default.jsonl').readline())
    assert first['event'] == 'start' and first['flops_per_step'] > 0


def test_compiled_cnn_stages_train_as_eager(tmp_path):
    _check(tmp_path, model='cnn', schedule='zb-h1')   # a split backward: input, then weight gradients on one compiled graph


@pytest.mark.slow
@pytest.mark.parametrize('schedule', ['zb-h1', 'chimera'])
def test_compiled_bert_stages_train_as_eager(tmp_path, schedule):
    _check(tmp_path, schedule=schedule)


def test_compile_flag():
    assert parse_config(['--compile']).spec.compile == 'default'
    assert parse_config(['--compile', 'reduce-overhead']).spec.compile == 'reduce-overhead'
    assert parse_config([]).spec.compile is None
