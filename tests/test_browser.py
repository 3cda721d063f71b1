"""Browser test of the viz explorer: a real JupyterLab server, a real notebook, headless Chromium via Playwright.

Starts `jupyter lab` on a free localhost port with a token, in a temp root holding a notebook that displays
`chimera_nb.viz.explorer()`; opens it in Debian's /usr/bin/chromium (no Playwright browser download: it fails
offline), runs all cells, waits for the plotly bars, changes controls (D, the schedule, an invalid D) and checks
the plot redraws, and saves screenshots. Every process it starts is stopped in the fixture teardown.
Set CHIMERA_BROWSER_OUT=dir to also copy the screenshots there."""
import json, os, shutil, signal, socket, subprocess, sys, time, secrets, urllib.request
from pathlib import Path
import pytest

CHROMIUM = os.environ.get('CHIMERA_CHROMIUM') or shutil.which('chromium') or '/usr/bin/chromium'
CHROME_ARGS = ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
               '--disable-background-networking', '--disable-component-update', '--disable-sync']

pytestmark = [pytest.mark.skipif(not os.access(CHROMIUM, os.X_OK),
                                 reason=f"no Chromium at {CHROMIUM}: install it (Debian: apt-get install chromium) to run the browser test"),
              pytest.mark.timeout(300)]

NOTEBOOK = {
    "cells": [
        {"cell_type": "code", "execution_count": None, "id": "imports", "metadata": {}, "outputs": [],
         "source": "from chimera_nb.viz import explorer, plot_timeline"},
        {"cell_type": "code", "execution_count": None, "id": "app", "metadata": {}, "outputs": [],
         "source": "ex = explorer('chimera', 4, 8)\nex"},
    ],
    "metadata": {"kernelspec": {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"},
                 "language_info": {"name": "python"}},
    "nbformat": 4, "nbformat_minor": 5,
}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


def _descendants(pid: int) -> list:
    try:
        import psutil
        return psutil.Process(pid).children(recursive=True)
    except Exception:
        return []


@pytest.fixture
def lab(tmp_path):
    "A JupyterLab server on a free port serving a temp root with explorer.ipynb; yields (url, root, log)."
    root, cfg = tmp_path / 'root', tmp_path / 'jupyter'
    root.mkdir(); cfg.mkdir()
    (root / 'explorer.ipynb').write_text(json.dumps(NOTEBOOK))
    # no news / update toasts over the screenshot; workspaces and settings stay in the temp dir
    settings = cfg / 'settings' / '@jupyterlab' / 'apputils-extension'
    settings.mkdir(parents=True)
    (settings / 'notification.jupyterlab-settings').write_text(json.dumps({"fetchNews": "false", "checkForUpdates": False}))
    env = dict(os.environ, JUPYTERLAB_SETTINGS_DIR=str(cfg / 'settings'), JUPYTERLAB_WORKSPACES_DIR=str(cfg / 'ws'),
               JUPYTER_RUNTIME_DIR=str(cfg / 'runtime'), PYTHONUNBUFFERED='1')
    port, token = _free_port(), secrets.token_hex(16)
    log = open(tmp_path / 'jupyterlab.log', 'w')
    cmd = [sys.executable, '-m', 'jupyterlab', '--no-browser', '--allow-root', f'--port={port}', '--ip=127.0.0.1',
           f'--IdentityProvider.token={token}', f'--ServerApp.root_dir={root}', '--ServerApp.port_retries=0',
           '--LabApp.news_url=', '--ServerApp.shutdown_no_activity_timeout=600']
    proc = subprocess.Popen(cmd, cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    base = f'http://127.0.0.1:{port}'
    try:
        deadline = time.time() + 90
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"jupyter lab exited with {proc.returncode}:\n{(tmp_path / 'jupyterlab.log').read_text()[-3000:]}")
            try:
                with urllib.request.urlopen(f'{base}/api/status?token={token}', timeout=2) as r:
                    if r.status == 200: break
            except OSError:
                pass
            if time.time() > deadline: raise RuntimeError("jupyter lab did not answer within 90 s")
            time.sleep(0.5)
        yield dict(base=base, token=token, root=root, log=tmp_path / 'jupyterlab.log', proc=proc)
    finally:
        kids = _descendants(proc.pid)   # kernels run in their own sessions: remember them to stop them too
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)   # the server shuts its kernels down on SIGTERM
            try: proc.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL); proc.wait(10)
        for k in kids:
            try:
                if k.is_running(): k.kill()
            except Exception:
                pass
        log.close()


def _plot_paths(page) -> int:
    "Bar paths in the explorer's timeline plot (the first plotly plot in the app)."
    plot = page.locator('.chimera-explorer .js-plotly-plot').first
    return plot.locator('.barlayer path').count()


def _wait_paths(page, predicate, timeout=60):
    deadline, n = time.time() + timeout, -1
    while time.time() < deadline:
        n = _plot_paths(page)
        if predicate(n): return n
        page.wait_for_timeout(250)
    raise AssertionError(f"plot did not reach the expected state; {n} bar paths")


def _expected_bars(name, D, N, **opts) -> int:
    "Number of bars plot_timeline draws for this schedule: actions plus idle bubbles."
    from chimera_nb.schedules import make_schedule
    from chimera_nb.simulate import simulate
    from chimera_nb.viz import plot_timeline
    fig = plot_timeline(simulate(make_schedule(name, D, N, **opts)))
    return sum(len(tr.x) for tr in fig.data)


def _run_all(page, tries=5):
    "Run > Run All Cells, again until the cells show they ran (a click can land before the notebook is ready)."
    prompts = page.locator('.jp-Notebook .jp-InputPrompt')
    for _ in range(tries):
        page.locator('.jp-Notebook .jp-Cell').first.click()
        page.keyboard.press('Escape')
        page.locator('.lm-MenuBar-itemLabel', has_text='Run').first.click()
        page.locator('.lm-Menu-itemLabel', has_text='Run All Cells').first.click()
        deadline = time.time() + 15
        while time.time() < deadline:
            if any(t.strip() not in ('[ ]:', '') for t in prompts.all_inner_texts()): return
            page.wait_for_timeout(250)
    raise AssertionError(f"Run All Cells did not start the cells: prompts {prompts.all_inner_texts()}")


def _shot(page, tmp_path, name) -> Path:
    p = tmp_path / name
    page.screenshot(path=str(p), full_page=True)
    if os.environ.get('CHIMERA_BROWSER_OUT'):
        out = Path(os.environ['CHIMERA_BROWSER_OUT']); out.mkdir(parents=True, exist_ok=True)
        shutil.copy(p, out / name)
    return p


def test_explorer_in_jupyterlab(lab, tmp_path):
    sync_playwright = pytest.importorskip('playwright.sync_api').sync_playwright
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROME_ARGS)
        try:
            page = browser.new_page(viewport={'width': 1500, 'height': 1100})
            page.set_default_timeout(60_000)
            page.goto(f"{lab['base']}/lab/tree/explorer.ipynb?token={lab['token']}")
            page.wait_for_selector('.jp-Notebook .jp-Cell', timeout=90_000)
            # the kernel must be up before 'Run All' (status shown in the toolbar)
            page.wait_for_selector('.jp-Notebook-ExecutionIndicator[data-status="idle"]', state='attached', timeout=90_000)
            _run_all(page)

            # rendered: the timeline's SVG bars, one path per bar of the figure
            page.wait_for_selector('.chimera-explorer .js-plotly-plot .barlayer path', timeout=120_000)
            first = _wait_paths(page, lambda n: n == _expected_bars('chimera', 4, 8))
            assert first > 64   # 64 actions plus the idle bubbles
            _shot(page, tmp_path, 'explorer-chimera-D4.png')

            # type a new D: the plot redraws in place with the bars of D=8
            d_input = page.locator('.chimera-explorer .widget-inline-hbox', has_text='D (stages)').locator('input')
            d_input.fill('8'); d_input.press('Enter')
            n8 = _wait_paths(page, lambda n: n == _expected_bars('chimera', 8, 8))
            assert n8 != first

            # pick another schedule from the dropdown
            page.locator('.chimera-explorer .widget-dropdown', has_text='schedule').locator('select').select_option('gpipe')
            ng = _wait_paths(page, lambda n: n == _expected_bars('gpipe', 8, 8))
            assert ng != n8
            shot = _shot(page, tmp_path, 'explorer-gpipe-D8.png')

            # an invalid choice shows its message in the app, and the last good plot stays
            page.locator('.chimera-explorer .widget-dropdown', has_text='schedule').locator('select').select_option('chimera')
            _wait_paths(page, lambda n: n == _expected_bars('chimera', 8, 8))
            d_input.fill('5'); d_input.press('Enter')
            page.wait_for_selector('.chimera-explorer :text("even number of stages")', timeout=30_000)
            assert _plot_paths(page) == _expected_bars('chimera', 8, 8)
            assert page.locator('.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]').count() == 0
            _shot(page, tmp_path, 'explorer-error.png')
            print(f"screenshots in {tmp_path}")
            assert shot.stat().st_size > 10_000
        except BaseException:
            try: _shot(page, tmp_path, 'explorer-failure.png')
            except Exception: pass
            raise
        finally:
            browser.close()
