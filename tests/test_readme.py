"""The README names files the demo really writes."""
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_readme_names_the_demos_files():
    readme = (ROOT / 'README.md').read_text() + (ROOT / 'nbs' / 'index.ipynb').read_text()
    named = set(re.findall(r'out/demo-metrics[\w.-]*', readme))
    import inspect
    report = __import__('chimera_nb.report', fromlist=['summarize'])
    src = inspect.getsource(report)   # summarize and the timeline page it writes
    written = {'out/demo-metrics.jsonl', 'out/demo-metrics-timeline.html', 'out/demo-metrics-summary.json'}
    assert "'-timeline.html'" in src and str(report.summary_path('out/demo-metrics.jsonl')) in written   # how the summary names them
    assert named and named <= written, named - written


def test_readme_autotune_example_prints_what_the_readme_shows():
    "The README's planning example, run as a user would paste it: its first pick is the one the README prints (a real pipeline)."
    import contextlib, io
    readme = (ROOT / 'README.md').read_text()
    code = next(b for b in re.findall(r'```python\n(.*?)```', readme, re.S) if 'autotune(' in b)
    shown = readme[readme.index(code):].split('```\n', 2)[2].split('```')[0]   # the output block right after the example
    ns, out = {}, io.StringIO()
    with contextlib.redirect_stdout(out): exec(code, ns)
    first = ns['tu'].ranking.iloc[0]
    want = next(l for l in shown.splitlines() if l.startswith('0 ')).split()
    assert [first.label.split()[0], str(first.W), str(first.D)] == [want[1], want[-8], want[-7]], (first, want)
    assert ns['tu'].best.D >= 2 and out.getvalue().startswith('Tuning(')
