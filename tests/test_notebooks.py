"""Run every notebook in nbs/ the way `nbdev-test` does, one pytest test per notebook,
so a single `pytest` call runs the notebook tests and the integration tests and ends with pytest's summary."""
from pathlib import Path
import pytest
from nbdev.test import test_nb as run_notebook

NBS = sorted(p for p in (Path(__file__).parent.parent / 'nbs').glob('*.ipynb') if not p.name.startswith('_'))

@pytest.mark.parametrize('nb', NBS, ids=[p.stem for p in NBS])
def test_notebook(nb, monkeypatch):
    monkeypatch.chdir(nb.parent)  # notebooks run from nbs/, as under nbdev-test
    ok, secs = run_notebook(nb, skip_flags=['notest', 'slow'], force_flags=[], do_print=False, basepath=nb.parent.parent)
    assert ok, f"{nb.name} failed (run `nbdev-test --path {nb}` for the traceback)"
