"""A real JupyterLab server for the browser tests, started as a user does (`chimera-nb lab`), on a free localhost port with a
token, its settings and workspaces in a temp folder; every process it starts (kernels included) is stopped on exit."""
import contextlib, json, os, shutil, signal, socket, subprocess, sys, time, secrets, urllib.request
from pathlib import Path

CHROMIUM = os.environ.get('CHIMERA_CHROMIUM') or shutil.which('chromium') or '/usr/bin/chromium'
CHROME_ARGS = ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
               '--disable-background-networking', '--disable-component-update', '--disable-sync']


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


@contextlib.contextmanager
def jupyter_lab(root:Path, tmp_path:Path):
    "JupyterLab serving `root` (chimera-nb lab writes chimera-playground.ipynb there); yields dict(base, token, root, log, proc)."
    cfg = tmp_path / 'jupyter'
    # no news / update toasts over the screenshot; workspaces and settings stay in the temp dir
    settings = cfg / 'settings' / '@jupyterlab' / 'apputils-extension'
    settings.mkdir(parents=True)
    (settings / 'notification.jupyterlab-settings').write_text(json.dumps({"fetchNews": "false", "checkForUpdates": False}))
    env = dict(os.environ, JUPYTERLAB_SETTINGS_DIR=str(cfg / 'settings'), JUPYTERLAB_WORKSPACES_DIR=str(cfg / 'ws'),
               JUPYTER_RUNTIME_DIR=str(cfg / 'runtime'), PYTHONUNBUFFERED='1')
    port, token = _free_port(), secrets.token_hex(16)
    log = open(tmp_path / 'jupyterlab.log', 'w')
    # started as a user does, by `chimera-nb lab`: it writes chimera-playground.ipynb into the root and runs JupyterLab
    cmd = [sys.executable, '-m', 'chimera_nb.cli', 'lab', str(root), '--no-browser', '--allow-root', f'--port={port}', '--ip=127.0.0.1',
           f'--IdentityProvider.token={token}', f'--ServerApp.root_dir={root}', '--ServerApp.port_retries=0',
           '--LabApp.news_url=', '--ServerApp.shutdown_no_activity_timeout=600', '--LabApp.expose_app_in_browser=True']
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


def wait_for(page, probe, predicate, timeout=120, what='the page'):   # bounded; generous for a loaded machine
    "Poll `probe(page)` until `predicate` holds; returns the value."
    deadline, v = time.time() + timeout, None
    while time.time() < deadline:
        try: v = probe(page)
        except Exception as e: v = e   # the plot is being replaced
        if not isinstance(v, Exception) and predicate(v): return v
        page.wait_for_timeout(100)
    raise AssertionError(f"{what} did not reach the expected state within {timeout} s; last {v!r}")


LOST_MODEL = 'Error displaying widget: model not found'


def reload_until(page, probe, predicate, timeout=120, what='the page after a reload'):
    """Reload and wait until `predicate(probe(page))`; returns (value, reloads). JupyterLab's widget manager has a race:
    a view waits 2 s for its model, and when the page's restore from the kernel finishes inside the last of those waits
    it shows "Error displaying widget: model not found" for a model the kernel holds (measured here: the restore had every
    model 20 ms later; it happens on this machine idle or loaded). Our restorer redraws the app in place (the console says
    '[chimera] redrew ...'); should it not, the page must show our hint to reload, and a reload must bring it back."""
    for reloads in (1, 2, 3):
        page.reload()
        page.wait_for_selector('.jp-Notebook .jp-Cell', timeout=120_000)
        try: return wait_for(page, probe, predicate, timeout, what), reloads
        except AssertionError as e:
            if page.locator('.jp-OutputArea-output', has_text=LOST_MODEL).count():
                hint = page.locator('.chimera-rerun').first
                assert hint.is_visible() and 'run this cell again' in hint.inner_text(), 'a widget JupyterLab lost must say what to do'
            print(f'not restored after reload {reloads} ({e}): reloading again, as the hint says')
    raise AssertionError(f"{what}: three reloads did not bring the widget back, though the kernel is alive")


RESTART_JS = """() => { const ctx = window.jupyterapp.shell.currentWidget.sessionContext; window.chimeraRestarted = false;
  ctx.statusChanged.connect((_, s) => { if (s === 'restarting' || s === 'autorestarting') window.chimeraRestarted = true; });
  window.jupyterapp.commands.execute('notebook:restart-kernel'); }"""
KERNEL_BACK_JS = "() => window.chimeraRestarted && window.jupyterapp.shell.currentWidget.sessionContext.session.kernel.status === 'idle'"


def restart_kernel(page, timeout=90):
    """Kernel > Restart, confirmed, and wait (bounded) until the new kernel is idle. The status indicator alone is not
    enough: it reads idle before the restart begins, and a reload then races the restart (a CI run drew the old widgets)."""
    page.evaluate(RESTART_JS)
    page.locator('.jp-Dialog button', has_text='Restart').click()
    wait_for(page, lambda p: p.evaluate(KERNEL_BACK_JS), bool, timeout, 'the restarted kernel')


def run_all(page, tries=5):
    "Run > Run All Cells, again until the cells show they ran (a click can land before the notebook is ready)."
    prompts = page.locator('.jp-Notebook .jp-InputPrompt')
    for _ in range(tries):
        choose = page.locator('.jp-Dialog', has_text='Select Kernel')   # JupyterLab sometimes asks (a loaded server):
        if choose.count(): choose.locator('button', has_text='Select').click()   # take the one it offers, as a user does
        page.locator('.jp-Notebook .jp-Cell').first.click()
        page.keyboard.press('Escape')
        page.locator('.lm-MenuBar-itemLabel', has_text='Run').first.click()
        page.locator('.lm-Menu-itemLabel', has_text='Run All Cells').first.click()
        deadline = time.time() + 15
        while time.time() < deadline:
            if any(t.strip() not in ('[ ]:', '') for t in prompts.all_inner_texts()): return
            page.wait_for_timeout(250)
    raise AssertionError(f"Run All Cells did not start the cells: prompts {prompts.all_inner_texts()}")


def screenshot(page, tmp_path, name, full=True, element=None) -> Path:
    "Screenshot the page (or one element, scrolled into view) into tmp_path (and $CHIMERA_BROWSER_OUT)."
    p = tmp_path / name
    if element is not None: element.screenshot(path=str(p))
    else: page.screenshot(path=str(p), full_page=full)
    if os.environ.get('CHIMERA_BROWSER_OUT'):
        out = Path(os.environ['CHIMERA_BROWSER_OUT']); out.mkdir(parents=True, exist_ok=True)
        shutil.copy(p, out / name)
    return p


def open_notebook(browser, lab, name, width=1280, height=900):
    "A page with notebook `name` open and its kernel idle (the status shown in the toolbar); its error list."
    page = browser.new_page(viewport={'width': width, 'height': height})
    page.set_default_timeout(60_000)
    errors = []
    page.on('console', lambda m: errors.append(m.text) if m.type == 'error' or m.text.startswith('[chimera]') else None)
    page.on('pageerror', lambda e: errors.append(str(e)))
    page.goto(f"{lab['base']}/lab/tree/{name}?token={lab['token']}&reset")   # reset: only this notebook open (one server serves all tests)
    page.wait_for_selector('.jp-Notebook .jp-Cell', timeout=90_000)
    page.wait_for_selector('.jp-Notebook-ExecutionIndicator[data-status="idle"]', state='attached', timeout=90_000)
    return page, errors


def close_sessions(lab):
    "Shut down every notebook session (its kernel) the server holds: a test that times a reload runs beside no other test's kernel."
    auth = {'Authorization': f"token {lab['token']}"}
    with urllib.request.urlopen(urllib.request.Request(f"{lab['base']}/api/sessions", headers=auth), timeout=30) as r:
        sessions = json.loads(r.read())
    for s in sessions:
        urllib.request.urlopen(urllib.request.Request(f"{lab['base']}/api/sessions/{s['id']}", method='DELETE', headers=auth), timeout=60).close()
    return len(sessions)


@contextlib.contextmanager
def chromium():
    "Debian's headless Chromium through Playwright (the test is skipped where either is missing), closed after the block."
    import pytest
    if not os.access(CHROMIUM, os.X_OK): pytest.skip(f"no Chromium at {CHROMIUM}: install it (Debian: apt-get install chromium)")
    sync_playwright = pytest.importorskip('playwright.sync_api').sync_playwright
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROME_ARGS)
        try: yield browser
        finally: browser.close()
