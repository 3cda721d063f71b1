"""The documentation site: `docs/build_docs.py` (what `make docs` runs) builds it from the notebooks and the code's
docments; its index and an API page open in headless Chromium and show their content."""
import os, re, subprocess, sys, time
from pathlib import Path
import pytest

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.skipif(subprocess.run([sys.executable, '-c', 'import mkdocs, mkdocs_jupyter, material'],
                                               capture_output=True).returncode != 0,
                                reason="mkdocs-material and mkdocs-jupyter are not installed (pip install -e '.[dev]')")


@pytest.fixture(scope='module')
def site(tmp_path_factory):
    "The site built once into a temp folder; (folder, seconds)."
    out = tmp_path_factory.mktemp('site')
    t = time.time()
    r = subprocess.run([sys.executable, 'docs/build_docs.py', '--site', str(out)], cwd=ROOT, capture_output=True, text=True,
                       timeout=300, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-4000:]
    return out, time.time() - t


def test_docs_build(site):
    out, secs = site
    print(f"docs built in {secs:.1f} s")   # a measurement, not a test: the time moves with the machine's load
    index = (out / 'index.html').read_text()
    assert 'Chimera bidirectional pipeline parallelism' in index and 'notebooks/02_viz.html' in index
    viz_nb = (out / 'notebooks' / '02_viz.html').read_text()
    assert 'One notation' in viz_nb and 'GLOSSARY' in viz_nb            # a notebook: its markdown and its code
    api = (out / 'api' / 'viz.html').read_text()
    assert 'plot_timeline' in api and 'text on bars' in api              # a signature, and a parameter's docments comment
    assert re.search(r'costs.{0,400}the costs it was simulated with', api, re.S)
    assert {p.stem for p in (out / 'api').glob('*.html')} >= {'schedules', 'simulate', 'viz', 'explore', 'spec', 'train'}


def test_docs_in_chromium(site, tmp_path):
    "The index and the viz API page in headless Chromium, opened as files: their headings and content are there."
    from test_browser import CHROMIUM, CHROME_ARGS, _shot
    if not os.access(CHROMIUM, os.X_OK): pytest.skip(f"no Chromium at {CHROMIUM}")
    sync_playwright = pytest.importorskip('playwright.sync_api').sync_playwright
    out, _ = site
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROME_ARGS)
        try:
            page = browser.new_page(viewport={'width': 1280, 'height': 900})
            page.goto((out / 'index.html').as_uri())
            assert page.locator('h1').first.inner_text().strip().startswith('chimera_nb')
            assert page.locator('nav').filter(has_text='viz').count() > 0          # the navigation lists the API pages
            _shot(page, tmp_path, 'docs-index.png', full=False)
            page.goto((out / 'api' / 'viz.html').as_uri())
            page.locator('h2#plot_timeline').wait_for()
            code = page.locator('h2#plot_timeline + div pre').first.inner_text()
            assert code.startswith('plot_timeline(timeline') and 'costs' in code, code
            table = page.locator('table').filter(has_text='text on bars').first.inner_text()   # material wraps tables in a div
            assert 'text on bars' in table and 'labels' in table, table
            page.locator('h2#plot_timeline').scroll_into_view_if_needed()
            _shot(page, tmp_path, 'docs-api-viz.png', full=False)
            print(f"screenshots in {tmp_path}")
        finally:
            browser.close()
