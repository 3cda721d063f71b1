"""bench/shape.py measures the project against issue 23's shape targets: it runs on this checkout and reports numbers
(whether the targets are met is the table's business, not this test's)."""
import re, subprocess, sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_shape_reports_the_targets_with_numbers():
    r = subprocess.run([sys.executable, str(ROOT / 'bench' / 'shape.py'), '--root', str(ROOT)], capture_output=True, text=True, timeout=60)
    assert r.returncode in (0, 1), r.stderr
    out = r.stdout
    n_nbs = len(list((ROOT / 'nbs').glob('*.ipynb')))
    assert re.search(r'\| exported cells \((\d+)\): mean lines +\| (\d+\.\d) ', out), out
    assert re.search(r'\| runtime\.py lines +\| \d+ ', out) and re.search(r'\| StepState fields +\| \d+ ', out), out
    assert re.search(r'\| exported cells followed by a test \| \d+% ', out), out
    assert '| 00_schedules ' in out and '| 06_runtime ' in out, out          # a row per notebook with exported cells
    rows = re.findall(r'^\| (\w+) +\| (\d+) +\| (\d+\.\d) +\| (\d+) +\| (\d+)% +\|$', out, re.M)
    assert 10 <= len(rows) <= n_nbs, rows
    met = re.search(r'(\d+) of (\d+) targets met', out)
    assert met and (r.returncode == 0) == (met[1] == met[2]), out        # exit status 1 exactly when a target is missed
