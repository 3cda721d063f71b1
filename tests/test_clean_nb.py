"""Running a notebook of this project in Jupyter leaves git clean: `make install` writes nbdev's Jupyter
pre-save hook, which cleans every notebook Jupyter saves inside the project (pyproject: jupyter_hooks, clear_all), outputs
included. Tested through Jupyter's own FileContentsManager.save, in a copy of the project's settings."""
import json, shutil
from pathlib import Path
import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_jupyter_saves_a_run_notebook_clean(tmp_path, monkeypatch):
    from jupyter_server.services.contents.filemanager import FileContentsManager
    from nbdev.clean import clean_jupyter
    shutil.copy(ROOT / 'pyproject.toml', tmp_path); (tmp_path / 'nbs').mkdir()
    committed = (ROOT / 'nbs' / '00b_spec.ipynb').read_text()
    monkeypatch.chdir(tmp_path)   # Jupyter runs from the project; nbdev finds its settings from there
    cm = FileContentsManager(root_dir=str(tmp_path), pre_save_hook=lambda **kw: clean_jupyter(**{k: kw[k] for k in ('path', 'model')}))
    nb = json.loads(committed)      # as JupyterLab sends it after Run All
    for i, c in enumerate(nb['cells']):
        if c['cell_type'] == 'code':
            c['execution_count'], c['metadata'] = i, {'execution': {'iopub.status.busy': '2026-11-25T06:00:00Z'}, 'scrolled': True}
            c['outputs'] = [{'name': 'stdout', 'output_type': 'stream', 'text': 'hello\n'}]
    nb['metadata'].update(language_info={'name': 'python', 'version': '3.11.7'})   # (widget state is saved only if the user turns it on)
    cm.save(dict(type='notebook', format='json', content=nb), 'nbs/00b_spec.ipynb')
    assert (tmp_path / 'nbs' / '00b_spec.ipynb').read_text() == committed   # byte for byte what git has


def test_make_install_installs_the_hook():
    assert 'c.ContentsManager.pre_save_hook = nbdev_clean_jupyter' in (ROOT / 'Makefile').read_text()
    cfg = (ROOT / 'pyproject.toml').read_text()
    assert 'jupyter_hooks = true' in cfg and 'clear_all = true' in cfg
