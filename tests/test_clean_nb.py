"""Running a notebook of this project in Jupyter leaves git clean, and a user's own notebook keeps its outputs: `make
install` copies tools/jupyter_save_hook.py into the venv's own Jupyter server config (.venv/etc/jupyter; the user-wide
~/.jupyter is left alone), which runs nbdev's clean on save (pyproject:
jupyter_hooks, clear_all) for the notebooks under the project's nbs/ only. Tested through Jupyter's own
FileContentsManager.save with that very hook, in a copy of the project's settings."""
import json, shutil
from pathlib import Path
import pytest

ROOT = Path(__file__).resolve().parent.parent
HOOK = ROOT / 'tools' / 'jupyter_save_hook.py'


def _hook():
    "The hook as Jupyter's config file defines it (`c` is the config object the file is run with)."
    from traitlets.config import Config
    scope = dict(c=Config())
    exec(compile(HOOK.read_text(), str(HOOK), 'exec'), scope)
    return scope['c'].ContentsManager.pre_save_hook


def _as_run(committed:str) -> dict:
    "The notebook as JupyterLab sends it after Run All: outputs, execution counts and metadata."
    nb = json.loads(committed)
    for i, c in enumerate(nb['cells']):
        if c['cell_type'] == 'code':
            c['execution_count'], c['metadata'] = i, {'execution': {'iopub.status.busy': '2026-11-25T06:00:00Z'}, 'scrolled': True}
            c['outputs'] = [{'name': 'stdout', 'output_type': 'stream', 'text': 'hello\n'}]
    nb['metadata'].update(language_info={'name': 'python', 'version': '3.11.7'})   # (widget state is saved only if the user turns it on)
    return nb


def test_jupyter_saves_source_notebooks_clean_and_user_notebooks_whole(tmp_path, monkeypatch):
    from jupyter_server.services.contents.filemanager import FileContentsManager
    shutil.copy(ROOT / 'pyproject.toml', tmp_path); (tmp_path / 'nbs').mkdir()
    committed = (ROOT / 'nbs' / '00b_spec.ipynb').read_text()
    monkeypatch.chdir(tmp_path / 'nbs')   # the server's working folder does not matter: the hook resolves the path itself
    cm = FileContentsManager(root_dir=str(tmp_path), pre_save_hook=_hook())
    cm.save(dict(type='notebook', format='json', content=_as_run(committed)), 'nbs/00b_spec.ipynb')
    assert (tmp_path / 'nbs' / '00b_spec.ipynb').read_text() == committed   # byte for byte what git has
    cm.save(dict(type='notebook', format='json', content=_as_run(committed)), 'chimera-playground.ipynb')
    saved = json.loads((tmp_path / 'chimera-playground.ipynb').read_text())
    assert [c['outputs'] for c in saved['cells'] if c['cell_type'] == 'code'][0][0]['text'] in ('hello\n', ['hello\n'])   # the user's outputs stay


def test_make_install_installs_the_hook():
    make = (ROOT / 'Makefile').read_text()
    assert 'cp tools/jupyter_save_hook.py $(JUPYTER_CFG)' in make
    cfg = (ROOT / 'pyproject.toml').read_text()
    assert 'jupyter_hooks = true' in cfg and 'clear_all = true' in cfg


def test_make_install_writes_only_the_venvs_jupyter_config():
    "The hook goes to the venv's config folder (sys.prefix/etc/jupyter, which the venv's Jupyter reads), replaced, not appended."
    make = (ROOT / 'Makefile').read_text()
    cfg = next(l for l in make.splitlines() if l.startswith('JUPYTER_CFG'))
    assert cfg.split(':=')[1].strip() == '$(VENV)/etc/jupyter/jupyter_server_config.py', cfg
    assert '$(HOME)/.jupyter' not in make and '>> $(JUPYTER_CFG)' not in make
    import sys, subprocess
    paths = subprocess.run([sys.executable, '-m', 'jupyter', '--paths', '--json'], capture_output=True, text=True, check=True).stdout
    assert str(Path(sys.prefix) / 'etc' / 'jupyter') in json.loads(paths)['config']   # where the venv's Jupyter looks first
