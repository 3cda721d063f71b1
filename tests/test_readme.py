"""The README names files the demo really writes."""
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_readme_names_the_demos_files():
    readme = (ROOT / 'README.md').read_text() + (ROOT / 'nbs' / 'index.ipynb').read_text()
    named = set(re.findall(r'out/demo-metrics[\w.-]*', readme))
    import inspect
    src = inspect.getsource(__import__('chimera_nb.train', fromlist=['_summary'])._summary)
    written = {'out/demo-metrics.jsonl', 'out/demo-metrics-timeline.html', 'out/demo-metrics-summary.json'}
    assert "'-timeline.html'" in src and "'-summary.json'" in src   # how the summary names them
    assert named and named <= written, named - written
