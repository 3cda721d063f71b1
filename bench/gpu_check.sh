#!/usr/bin/env bash
# The one GPU check, in one command, on a lent GPU machine (or any CUDA node): the CUDA tests, then bench/bench_gpu.py.
#   bash bench/gpu_check.sh            (from the repository root; about 7 minutes at most)
#   here, on a CPU, to check the script: PYTHON=.venv/bin/python BENCH_ARGS=--quick GPU_CHECK_SECONDS=300 bash bench/gpu_check.sh
# - Python packages the image lacks travel as wheels in .whl/ (fastcore: every chimera_nb module imports it; plotly for
#   the figures, which these checks do not draw): installed into /tmp/site, no index, no dependencies.
# - The data packages' files (the Wikipedia slice, BERT's vocabulary) travel in .whl/data-site: bench/pack_gpu_data.py.
# - The package runs from this checkout: PYTHONPATH=$PWD (nothing installed).
# - Logs go to $OUT (the device tool's folder that comes back), else out/gpu-check/: env.txt, pytest.log, bench.log,
#   bench_rows.jsonl (one JSON row per finished measurement, kept if the benchmark is cut off).
# - Each part runs under `timeout`; the whole stays within GPU_CHECK_SECONDS (default 450 s): the benchmark gets what
#   the tests leave, and skips compiled configurations that would not fit.
set -u
cd "$(dirname "$0")/.."
START=$(date +%s)
TOTAL=${GPU_CHECK_SECONDS:-450}
PYTEST_SECONDS=${PYTEST_SECONDS:-170}
PY=${PYTHON:-python3}
OUT=${OUT:-$PWD/out/gpu-check}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
elapsed() { echo $(( $(date +%s) - START )); }

if ls .whl/*.whl >/dev/null 2>&1; then
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    || echo "gpu_check: installing the wheels in .whl/ failed"
  export PYTHONPATH=/tmp/site:$PWD${PYTHONPATH:+:$PYTHONPATH}
else
  echo "gpu_check: no .whl/ here (carry it): fastcore must already be importable"
  export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
fi

# the data packages' files (bench/pack_gpu_data.py packs them here): found through their metadata, as when installed
[ -d .whl/data-site ] && export PYTHONPATH=$PYTHONPATH:$PWD/.whl/data-site

{
  echo "== $(date -u +%FT%TZ) $(hostname) $(uname -r), $(nproc) cores"
  nvidia-smi || echo "nvidia-smi failed"
  $PY - <<'EOF'
import importlib, sys
print('python', sys.version.split()[0], sys.executable)
for m in ('torch', 'triton', 'transformers', 'fastcore', 'plotly', 'pytest', 'pytest_timeout', 'numpy', 'pandas'):
    try: mod = importlib.import_module(m); print(f"{m} {getattr(mod, '__version__', '?')} {getattr(mod, '__file__', '')}")
    except Exception as e: print(f"{m}: NOT IMPORTABLE ({type(e).__name__}: {e})")
import torch
print('cuda', torch.version.cuda, 'available', torch.cuda.is_available(), 'devices', torch.cuda.device_count(),
      torch.cuda.get_device_name(0) if torch.cuda.is_available() else '')
import chimera_nb.testing, chimera_nb.runtime, chimera_nb.comm
print('chimera_nb from', chimera_nb.__file__)
EOF
  (gcc --version || cc --version) 2>&1 | head -1
} 2>&1 | tee "$OUT/env.txt"

echo "== pytest tests/test_gpu.py (timeout ${PYTEST_SECONDS} s), at $(elapsed) s"
timeout -k 10 "$PYTEST_SECONDS" $PY -m pytest tests/test_gpu.py -q -s -p no:cacheprovider -rfEs 2>&1 | tee "$OUT/pytest.log"
echo "== pytest exit ${PIPESTATUS[0]} (124: timed out), at $(elapsed) s"

LEFT=$(( TOTAL - $(elapsed) - 10 ))
[ "$LEFT" -lt 90 ] && LEFT=90
BUDGET=$(( LEFT - 25 ))
echo "== bench/bench_gpu.py --budget ${BUDGET} (timeout ${LEFT} s), at $(elapsed) s"
rm -f "$OUT/bench_rows.jsonl"
timeout -k 10 "$LEFT" $PY bench/bench_gpu.py ${BENCH_ARGS:-} --budget "$BUDGET" --pytest-log "$OUT/pytest.log" --json "$OUT/bench_rows.jsonl" 2>&1 | tee "$OUT/bench.log"
echo "== bench exit ${PIPESTATUS[0]} (124: timed out), total $(elapsed) s"
