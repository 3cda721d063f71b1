"""Run every notebook in nbs/ the way `nbdev-test` does, one pytest test per notebook,
so a single `pytest` call runs the notebook tests and the integration tests and ends with pytest's summary.
The experiment notebooks run at CHIMERA_EXPERIMENT_SIZE (tests/tiers.py: `smoke` in make test, `small` in make test-all);
the notebooks the docs test executes (tiers.DOCS_EXECUTED) are tested by that build, not run twice."""
from pathlib import Path
import pytest
from nbdev.test import test_nb as run_notebook
from tiers import DOCS_EXECUTED, EXPERIMENTS

NBS = sorted(p for p in (Path(__file__).parent.parent / 'nbs').glob('*.ipynb')
             if not p.name.startswith('_') and p.stem not in DOCS_EXECUTED)
PARAMS = [pytest.param(p, id=p.stem, marks=[pytest.mark.experiment] if p.stem in EXPERIMENTS else []) for p in NBS]


@pytest.mark.parametrize('nb', PARAMS)
def test_notebook(nb, monkeypatch):
    monkeypatch.chdir(nb.parent)  # notebooks run from nbs/, as under nbdev-test
    monkeypatch.delenv('SLURM_CONF', raising=False)   # and without the session's test cluster (its dry runs would ask it about hpg-b200)
    ok, secs = run_notebook(nb, skip_flags=['notest', 'slow'], force_flags=[], do_print=False, basepath=nb.parent.parent)
    assert ok, f"{nb.name} failed (run `nbdev-test --path-glob {nb.name}` from nbs/ for the traceback)"
