"""Llama-family decoders on real processes: `llama-tiny` (GQA, untied head, RoPE, RMSNorm, SwiGLU) split into stages on gloo
processes gives transformers' own LlamaForCausalLM's loss and gradients under every schedule (float64, the same weights,
AdamW and clipping over two steps), split backward (W actions) and recompute included; a tied variant keeps its tie across
ranks; hybrid data parallelism. The big presets' estimates feed the memory estimate and the tuner.
Run: .venv/bin/python -m pytest tests/test_llama.py -q
"""
import dataclasses, math
import pytest
import torch
from chimera_nb.launch import launch_local
from chimera_nb.models import build, to_stages, causal_lm_loss, parameter_count
from chimera_nb.catalog import PRESETS
from chimera_nb.payload import split_microbatches
from chimera_nb.runtime import PipelineRuntime
from chimera_nb.schedules import make_schedule

F64 = 1e-9

# (schedule, N, options) on D = 4 ranks; llama-tiny has 8 layers (embeddings, 6 decoder layers, head): D x 2 stages fit
CONFIGS_D4 = [
    ('gpipe', 4, {}),
    ('1f1b', 4, {}),
    ('gems', 4, {}),
    ('chimera', 4, {}),
    ('chimera', 8, dict(concat='direct')),
    ('chimera', 8, dict(concat='doubling')),    # forward doubling: two micro-batches a forward, backward with recompute
    ('chimera', 8, dict(concat='halving')),     # backward halving: half-size micro-batches
    ('chimera', 8, dict(pipes=4)),
    ('interleaved-1f1b', 4, dict(chunks=2)),
    ('zb-h1', 4, {}),                           # split backward: B (input gradient) and W (weight gradient) apart
    ('dualpipev', 8, {}),
    ('1f1b', 4, dict(recompute=True)),
    ('zb-h1', 4, dict(recompute=True)),         # recompute + split backward
]
CONFIGS_TIED = [('1f1b', 4, {}), ('chimera', 4, {}), ('zb-h1', 4, {})]
CONFIGS_HYBRID = [('chimera', 4, {}), ('1f1b', 4, dict(recompute=True))]


def _transformers_model(ml):
    "transformers' own model holding the built layers' weights (copied in by their transformers keys), in float64."
    import transformers as T
    hf = T.AutoModelForCausalLM.from_config(ml.config)
    sd = {keys[k][0]: t for l, keys in zip(ml.layers, ml.keys) for k, t in l.state_dict().items() if k in keys}
    missing, unexpected = hf.load_state_dict(sd, strict=False)
    assert not unexpected and set(missing) <= {'lm_head.weight'}, (missing, unexpected)   # a tied head is the embedding's own
    return hf.double()


def _hf_name(i, n, last):
    "The transformers parameter that layer `i`'s parameter `n` is."
    if i == 0 or (i == last and n.startswith('norm.')): return 'model.' + n
    return n if i == last else f"model.layers.{i - 1}.{n.removeprefix('layer.')}"


def _batch(vocab, n, L, g):
    "Token ids with right padding in the first row, labels -100 there (what the data loader and transformers expect)."
    ids = torch.randint(0, vocab, (n, L), generator=g)
    am = torch.ones(n, L, dtype=torch.long); am[0, L - 2:] = 0
    labels = ids.clone(); labels[am == 0] = -100
    return dict(input_ids=ids, attention_mask=am), labels


def _exact(rank, world, name, N, opts, dp_width=1, over=None, steps=2):
    opts, over = dict(opts), dict(over or {})
    rec = opts.pop('recompute', None)
    s = make_schedule(name, world // dp_width, N, **opts)
    if rec is not None: s = dataclasses.replace(s, recompute=rec)
    model = to_stages(build('llama-tiny', seed=4, attn_implementation='eager', **over), s.num_stages)
    for m in model.stages: m.double()
    hf = _transformers_model(model.layers)
    last, bounds = len(model.layers.layers) - 1, model.partition.boundaries
    where = {st: [(p, hf.get_parameter(_hf_name(bounds[st] + int(n.split('.')[1]), n.split('.', 2)[2], last)))
                  for n, p in m.named_parameters()] for st, m in enumerate(model.stages)}
    assert all(torch.equal(p, q) for pairs in where.values() for p, q in pairs)   # the same weights to start with
    rt = PipelineRuntime(s, model.stages, model.loss_fn, dp_width=dp_width, seed=11, ties=model.ties)
    opt = torch.optim.AdamW(list(rt.parameters()), lr=1e-3, weight_decay=0.1)
    ropt = torch.optim.AdamW(hf.parameters(), lr=1e-3, weight_decay=0.1)
    g, loss_err, grad_err, own_err = torch.Generator().manual_seed(2), 0.0, 0.0, 0.0
    for t in range(steps):
        pairs = [_batch(1024, 2, 6 + t, g) for _ in range(N * dp_width)]
        xs, ys = [p[0] for p in pairs], [p[1] for p in pairs]
        mine = slice(rt.dp_rank * N, (rt.dp_rank + 1) * N)
        loss = rt.step(xs[mine], ys[mine], max_norm=1.0)
        # transformers' model on the whole global batch, micro-batch by micro-batch as the schedule cuts it (halving: halves)
        rx = [p for w in range(dp_width) for p in split_microbatches(xs[w * N:(w + 1) * N], s)]
        ry = [p for w in range(dp_width) for p in split_microbatches(ys[w * N:(w + 1) * N], s)]
        ropt.zero_grad(); rloss = 0.0
        for x, y in zip(rx, ry):
            out = hf(**x, labels=y)
            l = causal_lm_loss(out.logits, y)   # transformers' own loss upcasts to float32: checked against it below, not used
            own_err = max(own_err, abs(out.loss.item() - l.item()) / l.item())
            (l / len(rx)).backward(); rloss += l.item() / len(rx)
        torch.nn.utils.clip_grad_norm_(hf.parameters(), 1.0)
        loss_err = max(loss_err, abs(loss - rloss) / rloss)
        floor = 1e-8 * torch.stack([q.grad.norm() for q in hf.parameters()]).norm()
        for st in rt.stages:
            for p, q in where[st]: grad_err = max(grad_err, ((p.grad - q.grad).norm() / torch.maximum(q.grad.norm(), floor)).item())
        opt.step(); ropt.step()
    return loss_err, grad_err, own_err


def _run(rank, world, configs, **kw): return [_exact(rank, world, name, N, opts, **kw) for name, N, opts in configs]


def _check(results, configs, what):
    for i, (name, N, opts) in enumerate(configs):
        loss_err = max(r[i][0] for r in results); grad_err = max(r[i][1] for r in results); own = max(r[i][2] for r in results)
        assert loss_err < F64 and grad_err < F64, (what, name, N, opts, loss_err, grad_err)
        assert own < 1e-6, (what, name, own)   # transformers' own (float32) loss agrees as far as float32 goes


@pytest.mark.timeout(600)
def test_llama_every_schedule_matches_transformers_d4():
    "Every schedule, split backward and recompute: the pipeline's loss and gradients are transformers' LlamaForCausalLM's."
    _check(launch_local(_run, 4, CONFIGS_D4, timeout=580), CONFIGS_D4, 'untied D=4')


@pytest.mark.timeout(300)
def test_llama_tied_embeddings_and_hybrid_parallelism():
    "A tied head (tie_word_embeddings, as the small Qwen2.5s) kept tied across ranks 0 and D-1; W=2 x D=2."
    _check(launch_local(_run, 4, CONFIGS_TIED, over=dict(tie_word_embeddings=True), timeout=280), CONFIGS_TIED, 'tied')
    _check(launch_local(_run, 4, CONFIGS_HYBRID, dp_width=2, timeout=280), CONFIGS_HYBRID, 'W=2 D=2')


def test_published_parameter_counts():
    "Counted on the meta device (no weights): the model cards' counts, exactly."
    for k, n in (('llama3-8b', 8_030_261_248), ('llama3-70b', 70_553_706_496), ('qwen2.5-7b', 7_615_616_512)):
        assert parameter_count(k) == dict(tied=n, untied=n, paper=n) == dict(tied=PRESETS[k].paper_params, untied=n, paper=n)


def test_estimates_memory_and_tuner_read_the_big_presets():
    """estimate_profile from the shapes (its parameters the model's own count, no tie for an untied head, GQA's narrower K/V),
    the per-rank memory estimate, and the tuner (and the playground's model list) for Llama-3-8B on B200s."""
    from chimera_nb.profile import estimate_profile
    from chimera_nb.hardware import HARDWARE
    from chimera_nb.memory import memory_estimate
    from chimera_nb.autotune import autotune
    from chimera_nb.playground import _MODELS
    b200 = HARDWARE['b200']
    for k in ('llama3-8b', 'llama3-70b', 'qwen2.5-7b', 'llama-tiny'):
        p = estimate_profile(k, b200)
        assert sum(l.params for l in p.layers) == parameter_count(k)['untied'] and p.ties == [] and len(p.layers) == PRESETS[k].config['num_hidden_layers'] + 2
        assert k in _MODELS
    p = estimate_profile('llama3-8b', b200)
    h, kv, f = 4096, 1024, 14336   # 8 K/V heads of 128: K and V are a quarter of Q
    assert p.layers[1].params == 2 * h * h + 2 * h * kv + 3 * h * f + 2 * h
    assert p.layers[-1].params == 128256 * h + h and p.layers[0].params == 128256 * h   # the vocabulary head is the last stage's own weight
    sp = p.stage_profiles(8)
    assert sp[-1].params == p.layers[-1].params   # the head (2hV FLOPs a token: 2.4 blocks' worth) is a stage of its own
    est = memory_estimate(make_schedule('1f1b', 8, 8), sp)
    assert (est.total < b200.memory_bytes).all() and est.weights[7] == sp[7].param_bytes
    tu = autotune(32, 256, model='llama3-8b', hardware=b200, micro_batch_sizes=[1, 2, 4], depths=[4, 8])
    best = tu.best
    assert best.model == 'llama3-8b' and best.hardware == 'b200' and best.seq_len == 4096 and best.W * best.D == 32
    assert 0 < tu.ranking.memory_GiB.iloc[0] * 2**30 <= b200.memory_bytes


@pytest.mark.slow   # the default tier: every schedule against transformers (test_llama_every_schedule_matches_transformers_d4)
@pytest.mark.timeout(600)
def test_chimera_train_llama_tiny(tmp_path):
    """`chimera-train --model llama-tiny` trains (the loss falls from uniform guessing on the Wikipedia slice), and Chimera,
    ZB-H1 (split backward), DualPipeV and interleaved 1F1B with recompute on 4 processes log the losses of --stages 1 (float64).
    The command's main runs in this process (its console script is a real process in test_train.py::test_the_command)."""
    import contextlib, io, json
    from chimera_nb.cli import train_main
    from chimera_nb.train import train
    from chimera_nb.spec import TrainConfig
    with contextlib.redirect_stdout(io.StringIO()):
        code = train_main(['--model', 'llama-tiny', '--schedule', 'chimera', '-D', '4', '-N', '4', '-B', '4', '--steps', '30',
                           '--lr', '1e-2', '--warmup', '3', '--local-ranks', '4', '--no-progress', '--metrics', str(tmp_path / 'm.jsonl')])
    assert code == 0
    losses = [r['loss'] for r in map(json.loads, open(tmp_path / 'm.jsonl')) if 'loss' in r and 'event' not in r]
    assert len(losses) == 30 and losses[0] > math.log(1024) - 0.2 and sum(losses[-5:]) / 5 < losses[0] - 0.5, losses
    base = dict(model='llama-tiny', dtype='float64', clip_grad=0.5, lr=3e-3, weight_decay=0.1, N=8, B=2, seed=3, steps=4,
                progress=False, eval_batches=1)
    want = [l for _, l in train(TrainConfig.from_dict(dict(base, schedule='1f1b', D=1, local_ranks=1))).losses]
    for schedule, extra in (('chimera', {}), ('zb-h1', {}), ('dualpipev', {}), ('interleaved-1f1b', dict(recompute=True))):
        got = [l for _, l in train(TrainConfig.from_dict(dict(base, schedule=schedule, D=4, local_ranks=4, **extra))).losses]
        assert len(got) == 4 and all(abs(a - b) <= 1e-9 * b for a, b in zip(got, want)), (schedule, got, want)
