"""The documentation site: `docs/build_docs.py` (what `make docs` runs) builds it from the notebooks and the code's
docments. Built here with the pages of 00_schedules and 02_viz (`--notebooks`; the whole site is built in the slow
tier), 02_viz executed (`--execute 02_viz --no-cache`: that run is its notebook test; `make docs` executes them all but
NOT_EXECUTED), then read as files and opened in headless Chromium from file://, as a user opens `_site/`:
pages render the notebooks as nbdev does (no `#|` directives, no hidden, exported or test cells, show_doc in their
place), the Viz page draws its plotly figures from the site's own plotly.js, the sidebar scrolls to its last entry at
1280x900, and search answers from file://. Screenshots go to a temp folder the test prints (and $CHIMERA_BROWSER_OUT)."""
import os, re, subprocess, sys, time
from pathlib import Path
import pytest

ROOT = Path(__file__).resolve().parent.parent
from tiers import DOCS_EXECUTED
# one build for the module: its tests share one xdist worker (the pages in Chromium are files, not JupyterLab: no browser tier)
pytestmark = [pytest.mark.xdist_group('docs'), pytest.mark.timeout(900), pytest.mark.skipif(subprocess.run([sys.executable, '-c', 'import mkdocs, mkdocs_jupyter, material, nbclient'],
                                               capture_output=True).returncode != 0,
                                reason="mkdocs-material and mkdocs-jupyter are not installed (pip install -e '.[dev]')")]
PAGES = ('00_schedules', *DOCS_EXECUTED)   # the notebook pages the default tier's site has: one not executed, one executed


def build(out:Path, stage:Path, *args) -> subprocess.CompletedProcess:
    "docs/build_docs.py into `out` (its sources staged in `stage`) with `args`; it must succeed."
    r = subprocess.run([sys.executable, 'docs/build_docs.py', '--site', str(out), '--stage', str(stage), *args],
                       cwd=ROOT, capture_output=True, text=True, timeout=600, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-4000:]
    return r

# text of the cells 02_viz must not show: its `#| hide` imports, a test cell, an exported cell's code
HIDDEN = ['from fastcore.test import test_eq, test_fail, test_close',          # #| hide
          "test_eq(set(GLOSSARY), {'W', 'D', 'B', 'N'",                        # a test cell
          '_PIPE_HUES = (']                                                    # #| export (shown by its show_doc instead)


@pytest.fixture(scope='module')
def site(tmp_path_factory):
    "The site built once into a temp folder, executing 02_viz only (its notebook test: test_notebooks leaves it to this build); (folder, seconds, log)."
    out, stage = tmp_path_factory.mktemp('site'), tmp_path_factory.mktemp('stage')
    t = time.time()
    r = build(out, stage, '--notebooks', *PAGES, '--execute', *DOCS_EXECUTED, '--no-cache')
    print(r.stderr[-1500:])
    return out, time.time() - t, r.stderr


def test_docs_build(site):
    out, secs, log = site
    print(f"docs built in {secs:.1f} s")   # a measurement, not a test: the time moves with the machine's load
    for stem in DOCS_EXECUTED:   # executed without a cell error: the notebook's own tests passed (as under nbdev-test)
        assert re.search(rf'^  {stem}\.ipynb: executed in \d+ s$', log, re.M), log[-3000:]
    index = (out / 'index.html').read_text()
    assert 'Chimera bidirectional pipeline parallelism' in index and 'notebooks/02_viz.html' in index
    viz_nb = (out / 'notebooks' / '02_viz.html').read_text()
    assert 'One notation' in viz_nb and 'GLOSSARY' in viz_nb            # a notebook: its markdown and its code
    api = (out / 'api' / 'viz.html').read_text()
    assert 'plot_timeline' in api and 'text on bars' in api              # a signature, and a parameter's docments comment
    assert re.search(r'costs.{0,400}the costs it was simulated with', api, re.S)
    assert {p.stem for p in (out / 'api').glob('*.html')} >= {'schedules', 'simulate', 'viz', 'explore', 'spec', 'train'}


def test_docs_pages_as_nbdev(site):
    "Notebook pages as nbdev renders them, the executed one with its outputs, the others with a note; offline search."
    out = site[0]
    pages = {p.stem: p.read_text() for p in (out / 'notebooks').glob('*.html')}
    assert set(pages) == set(PAGES), set(pages)   # --notebooks: these pages only (the whole site: test_the_whole_site_builds)
    assert not [n for n, h in pages.items() if '#|' in h], 'nbdev directives shown'
    viz = pages['02_viz']
    for text in HIDDEN: assert text not in viz, text
    assert '<h3 id="plot_timeline"' in viz and 'text on bars' in viz       # show_doc of an exported function, its docments
    assert "plot_timeline(simulate(make_schedule('gpipe', 4, 4)))" in re.sub(r'<[^>]+>', '', viz).replace('&#39;', "'")
    assert viz.count('plotly-graph-div') >= 5 and viz.count('plotly.min.js"></script>') == 1   # figures; plotly.js once
    assert 'cdn.plot.ly' not in viz and 'Not executed for this site' not in viz
    assert 'Not executed for this site' in pages['00_schedules'] and 'plotly-graph-div' not in pages['00_schedules']
    assert (out / 'assets' / 'javascripts' / 'plotly.min.js').stat().st_size > 1_000_000
    assert (out / 'search' / 'search_index.js').read_text().startswith('var __index =')   # the offline plugin's index
    index = (out / 'index.html').read_text()
    assert 'unpkg.com' not in index                                        # the iframe-worker shim is the site's own
    assert 'data-md-component="source"' not in index and '"repo_url"' not in index   # no repository widget: no call to api.github.com
    assert 'https://github.com/chimera-nb/chimera_nb' in index             # the project's link, as a plain link


def test_docs_in_chromium(site, pages, tmp_path):
    "The index and the viz API page in headless Chromium, opened as files: their headings and content are there."
    from lab_server import screenshot as _shot
    out = site[0]
    page, _ = pages.blank(1280, 900)
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


def test_docs_site_in_chromium(site, pages, tmp_path):
    """From file:// at 1280x900: the Viz page draws plotly figures and shows no directive, hidden or test cell; the
    sidebar scrolls to its last entry (the last API page), which opens; search finds pages."""
    from lab_server import screenshot as _shot
    out = site[0]
    page, errors = pages.blank(1280, 900)
    page.goto((out / 'notebooks' / '02_viz.html').as_uri())
    plot = page.locator('.js-plotly-plot').first
    plot.locator('svg.main-svg').first.wait_for(timeout=30_000)
    assert page.locator('.js-plotly-plot').count() >= 5
    bars = plot.locator('.barlayer path').count()
    assert bars >= 32, bars                                         # chimera D=4 N=4: 32 actions, bubbles besides
    text = page.locator('article').inner_text()
    assert '#|' not in text and not [h for h in HIDDEN if h in text]
    plot.scroll_into_view_if_needed()
    _shot(page, tmp_path, 'docs-viz-figure.png', full=False)

    # the sidebar: taller than the window, it scrolls on its own; its last entry comes into view and opens
    wrap = page.locator('.md-sidebar--primary .md-sidebar__scrollwrap')
    scroll_h, client_h = wrap.evaluate('e => [e.scrollHeight, e.clientHeight]')
    assert scroll_h > client_h, (scroll_h, client_h)
    last = page.locator('.md-sidebar--primary .md-nav__link[href]').last
    name = last.inner_text().strip()
    wrap.hover(); page.mouse.wheel(0, 5000)                                # scroll as a user does, with the wheel
    in_view = lambda b: b is not None and 0 <= b['y'] and b['y'] + b['height'] <= 900
    for _ in range(100):                                                   # a loaded machine scrolls late: up to 10 s
        if in_view(box := last.bounding_box()): break
        page.wait_for_timeout(100)
    assert in_view(box), box
    assert wrap.evaluate('e => e.scrollTop') > 0
    _shot(page, tmp_path, 'docs-sidebar-end.png', full=False)
    last.click()
    page.wait_for_url(re.compile(rf'/api/{re.escape(name)}\.html$'))
    assert page.locator('h1').first.inner_text().strip() == f'chimera_nb.{name}'

    # search from file:// (the offline plugin's inlined index, run by the vendored iframe-worker shim)
    page.goto((out / 'index.html').as_uri())
    page.locator('input.md-search__input').click()
    page.keyboard.type('plot_timeline', delay=30)
    page.locator('.md-search-result__item').first.wait_for(timeout=30_000)
    meta = page.locator('.md-search-result__meta').inner_text()
    assert re.match(r'\d+ matching documents?', meta), meta
    assert page.locator('.md-search-result__item').filter(has_text='plot_timeline').count() > 0
    _shot(page, tmp_path, 'docs-search.png', full=False)
    assert not errors, errors
    print(f"screenshots in {tmp_path}")


@pytest.mark.slow
def test_the_whole_site_builds(tmp_path):
    "Every notebook has its page (none executed here: `make docs` executes them), rendered as nbdev does, and the sidebar lists them all."
    out = tmp_path / 'site'
    build(out, tmp_path / 'stage', '--execute', 'none')
    nbs = {p.stem for p in (ROOT / 'nbs').glob('*.ipynb') if not p.name.startswith('_')} - {'index'}
    pages = {p.stem: p.read_text() for p in (out / 'notebooks').glob('*.html')}
    assert set(pages) == nbs, nbs ^ set(pages)
    assert not [n for n, h in pages.items() if '#|' in h], 'nbdev directives shown'
    assert all('Not executed for this site' in h for h in pages.values())
    index = (out / 'index.html').read_text()
    assert all(f'notebooks/{n}.html' in index for n in nbs), [n for n in nbs if f'notebooks/{n}.html' not in index]
