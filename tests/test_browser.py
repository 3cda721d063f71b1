"""Browser test of the viz explorer: a real JupyterLab server, a real notebook, headless Chromium via Playwright.

Starts `jupyter lab` on a free localhost port with a token, in a temp root holding a notebook that displays
`chimera_nb.explore.explorer()`; opens it in Debian's /usr/bin/chromium (no Playwright browser download: it fails
offline) in a 1280x800 window, runs all cells, waits for the plotly bars, then checks in the page: the legend's
items all visible; schedules switched in sequence leave exactly their own closed-form lines (shapes) in the
memory plot's DOM; N = 0 and odd D give messages; a save button writes its file; JupyterLab's dark theme turns
the figures dark; D = 64, N = 512 draws (summarised) and the next control change still reaches Python and
redraws within a measured bound. Each state is screenshotted into a folder the test prints (also copied to
$CHIMERA_BROWSER_OUT when set). Every process it starts is stopped in the fixture teardown."""
import json, os, subprocess, sys, time
from pathlib import Path
import pytest
sys.path.insert(0, str(Path(__file__).parent))
from lab_server import run_all, screenshot, wait_for, reload_until, restart_kernel, close_sessions, CHROMIUM

# the session's JupyterLab (`lab`) and Chromium (`pages`: a fresh context per test, a screenshot when it fails) are tests/conftest.py's
pytestmark = [pytest.mark.browser,
              pytest.mark.skipif(not os.access(CHROMIUM, os.X_OK),
                                 reason=f"no Chromium at {CHROMIUM}: install it (Debian: apt-get install chromium) to run the browser test"),
              pytest.mark.timeout(300)]

NOTEBOOK = {
    "cells": [
        {"cell_type": "code", "execution_count": None, "id": "imports", "metadata": {}, "outputs": [],
         "source": "from chimera_nb.explore import explorer\nfrom chimera_nb.viz import plot_timeline"},
        {"cell_type": "code", "execution_count": None, "id": "app", "metadata": {}, "outputs": [],
         "source": "ex = explorer('chimera', 4, 8)\nex"},
    ],
    "metadata": {"kernelspec": {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"},
                 "language_info": {"name": "python"}},
    "nbformat": 4, "nbformat_minor": 5,
}


PLAYGROUND = {**NOTEBOOK, "cells": [
    {"cell_type": "code", "execution_count": None, "id": "imports", "metadata": {}, "outputs": [],
     "source": "from chimera_nb.playground import Playground"},
    {"cell_type": "code", "execution_count": None, "id": "app", "metadata": {}, "outputs": [],
     "source": "app = Playground('bert-48', 'b200', 8, 64, micro_batch_sizes=(4,))\napp.tune()\napp"},
    {"cell_type": "code", "execution_count": None, "id": "spec", "metadata": {}, "outputs": [],
     "source": "print('chosen:', app.spec, app.explorer.spec == app.spec)"}]}


RELOAD = {**NOTEBOOK, "cells": [
    {"cell_type": "code", "execution_count": None, "id": "app", "metadata": {}, "outputs": [],
     "source": "from chimera_nb.explore import explorer\nex = explorer('chimera', 4, 8)\nex"}]}


@pytest.fixture(scope='module', autouse=True)
def notebooks(jupyter):
    "This module's notebooks, written into the session's JupyterLab root; the app notebook's text as `chimera-nb lab` wrote it."
    for name, nb in (('explorer', NOTEBOOK), ('playground', PLAYGROUND), ('reload', RELOAD), ('playground-reload', PLAYGROUND_RELOAD)):
        (jupyter['root'] / f'{name}.ipynb').write_text(json.dumps(nb))
    return (jupyter['root'] / 'chimera-playground.ipynb').read_text()   # before a test saves it with outputs


def _plot_paths(page) -> int:
    "Bar paths in the explorer's timeline plot (the first plotly plot in the app)."
    plot = page.locator('.chimera-explorer .js-plotly-plot').first
    return plot.locator('.barlayer path').count()


def _wait_paths(page, predicate, timeout=120):
    return wait_for(page, _plot_paths, predicate, timeout, 'the timeline plot')


PLOTS_JS = """() => Array.from(document.querySelectorAll('.chimera-explorer .js-plotly-plot')).map(gd => ({
    redraw: gd.layout && gd.layout.meta ? gd.layout.meta.redraw : null,
    theme: gd.layout && gd.layout.meta ? gd.layout.meta.theme : null,
    paper: gd._fullLayout ? gd._fullLayout.paper_bgcolor : null,
    shapes: gd.querySelectorAll('.shapelayer path').length,
    paperText: Array.from(gd.querySelectorAll('.annotation-text')).map(a => a.textContent).filter(t => t.startsWith('paper')),
    raster: gd.querySelectorAll('.heatmaplayer image').length,
    bars: gd.querySelectorAll('.barlayer path').length}))"""


def _plots(page) -> list: return page.evaluate(PLOTS_JS)


def _timing_ms(page):
    "The explorer's 'shown in' time (control change to painted figures, measured by its page probe), or None."
    t = page.locator('.chimera-explorer .chimera-timing b[data-total-ms]')
    return int(t.first.get_attribute('data-total-ms')) if t.count() else None


def _settled(page, redraw):
    "Wait until both plots show redraw number `redraw` and the status has its browser timing; the plots' state."
    plots = wait_for(page, _plots, lambda ps: len(ps) == 2 and all(p['redraw'] == redraw for p in ps), 120, f'redraw {redraw}')
    wait_for(page, _timing_ms, lambda v: v is not None, 60, 'the status timing')
    return plots


LEGEND_JS = """() => { const gd = document.querySelector('.chimera-explorer .js-plotly-plot');
  const svg = gd.querySelector('.main-svg').getBoundingClientRect();
  const items = Array.from(gd.querySelectorAll('.legend .traces, .legend .groupheader')).map(t => {
      const r = t.getBoundingClientRect(); return {text: t.textContent, l: r.left, r: r.right, t: r.top, b: r.bottom}; });
  const sb = gd.querySelector('.legend .scrollbar');
  return {svg: {l: svg.left, r: svg.right, t: svg.top, b: svg.bottom}, items,
          scrollbar: sb ? sb.getBoundingClientRect().height : 0, width: window.innerWidth}; }"""


def _expected_bars(name, D, N, costs=(1, 1, 1), **opts) -> int:
    "Number of bars plot_timeline draws for this schedule under the explorer's default costs: actions plus idle bubbles."
    from chimera_nb.schedules import make_schedule
    from chimera_nb.simulate import simulate, Costs
    from chimera_nb.viz import plot_timeline
    fig = plot_timeline(simulate(make_schedule(name, D, N, **opts), Costs(*costs)))
    return sum(len(tr.x) for tr in fig.data)


def _playground_bars(name, W, D, B, N, model='bert-48', hardware='b200') -> int:
    "Bars the playground's explorer draws for this choice: its timeline in seconds, from the tuner's profile (as the prediction)."
    from chimera_nb.spec import PipelineSpec
    from chimera_nb.perf_model import predicted_costs
    from chimera_nb.program import lower, resolve_sync
    from chimera_nb.profile import estimate_profile
    from chimera_nb.hardware import HARDWARE
    from chimera_nb.simulate import simulate
    from chimera_nb.viz import plot_timeline
    spec, prof = PipelineSpec(model=model, schedule=name, W=W, D=D, B=B, N=N), estimate_profile(model, HARDWARE[hardware], 1).at(B)
    s = spec.make()
    tl = simulate(lower(s, resolve_sync(spec.sync, prof.comm_overlaps), W), predicted_costs(prof, s, W))
    return sum(len(tr.x) for tr in plot_timeline(tl).data)


APP_TIMING_JS = """() => { window.__appTiming = {}; const t = window.__appTiming;
  const tick = () => {
    const cell = document.querySelectorAll('.jp-Notebook .jp-CodeCell')[0];
    const prompt = cell ? cell.querySelector('.jp-InputPrompt').textContent.trim() : '';
    if (t.done === undefined && /\\[\\d+\\]/.test(prompt)) t.done = performance.now();
    if (t.drawn === undefined && document.querySelector('.chimera-explorer .js-plotly-plot .barlayer path')) t.drawn = performance.now();
    if (t.done === undefined || t.drawn === undefined) setTimeout(tick, 20); };
  tick(); }"""


def _type(page, label, value):
    "Type `value` into the explorer's number box labelled `label` and press Enter."
    box = page.locator('.chimera-explorer .widget-inline-hbox', has_text=label).locator('input').first
    box.fill(str(value)); box.press('Enter')


def _select(page, label, value):
    page.locator('.chimera-explorer .widget-dropdown', has_text=label).locator('select').select_option(value)


def _redraw_no(page) -> int:
    ps = _plots(page)
    return max((p['redraw'] or 0 for p in ps), default=0)


def test_explorer_in_jupyterlab(lab, pages, tmp_path):
    timings = {}
    page, errors = pages.notebook(lab, 'explorer.ipynb', height=800)   # errors: the page's own, shown when the test fails
    run_all(page)

    # rendered: the timeline's SVG bars, one path per bar of the figure; the status has the browser's time
    page.wait_for_selector('.chimera-explorer .js-plotly-plot .barlayer path', timeout=120_000)
    first = _wait_paths(page, lambda n: n == _expected_bars('chimera', 4, 8))
    assert first > 64   # 64 actions plus the idle bubbles
    r = _redraw_no(page)
    _settled(page, r)
    timings['first draw (D=4, N=8)'] = _timing_ms(page)

    # the legend: every item inside the figure and the 1280 px window, no scroll bar (with an all-reduce lane)
    _type(page, 'all-reduce', 1.5)
    _settled(page, r + 1); r += 1
    leg = page.evaluate(LEGEND_JS)
    texts = [i['text'] for i in leg['items']]
    assert any('gradient all-reduce' in t for t in texts) and any('down' in t for t in texts), texts
    assert leg['scrollbar'] == 0, leg
    for i in leg['items']:
        assert leg['svg']['l'] <= i['l'] and i['r'] <= min(leg['svg']['r'], leg['width']) + 0.5, (i, leg['svg'])
        assert leg['svg']['t'] <= i['t'] and i['b'] <= leg['svg']['b'] + 0.5, (i, leg['svg'])
    page.locator('.chimera-explorer .js-plotly-plot').first.scroll_into_view_if_needed()
    screenshot(page, tmp_path, '1-legend-1280x800.png', full=False)

    # type a new D: the plot redraws with the bars of D=8
    _type(page, 'all-reduce', 0)
    _settled(page, r + 1); r += 1
    _type(page, 'D (stages)', 8)
    # by number, not by bars: plotly paints a redraw's new bars before its layout (and its meta.redraw number)
    _settled(page, r + 1); r += 1
    n8 = _wait_paths(page, lambda n: n == _expected_bars('chimera', 8, 8))
    assert n8 != first
    _type(page, 'N (micro-batches)', 16)   # DualPipeV needs N >= 2D
    _settled(page, r + 1); r += 1

    # switch schedules in sequence: the memory plot's DOM holds exactly each schedule's closed-form lines
    seen = []
    for name, paper in (('gpipe', ['paper 16']), ('chimera', ['paper min 5', 'paper max 8']), ('dualpipev', []),
                        ('1f1b', ['paper min 1', 'paper max 8'])):
        _select(page, 'schedule', name)
        tl_plot, mem = _settled(page, r + 1); r += 1
        assert mem['shapes'] == len(paper) and sorted(mem['paperText']) == sorted(paper), (name, mem)
        assert tl_plot['bars'] == _expected_bars(name, 8, 16), (name, tl_plot)
        seen.append((name, mem['shapes']))
        if name == 'gpipe':
            screenshot(page, tmp_path, '2-gpipe-D8-N16-memory.png', element=page.locator('.chimera-explorer .js-plotly-plot').nth(1))
    print('memory-plot shapes per schedule:', seen)
    screenshot(page, tmp_path, '3-after-switching-memory.png', element=page.locator('.chimera-explorer .js-plotly-plot').nth(1))

    # N = 0 is refused with a message (the box keeps 0); an odd D for Chimera too; the last good plot stays
    _type(page, 'N (micro-batches)', 0)
    page.wait_for_selector('.chimera-explorer :text("choose at least 1 micro-batch")', timeout=90_000)
    _type(page, 'N (micro-batches)', 8)
    _settled(page, r + 1); r += 1
    _select(page, 'schedule', 'chimera')
    _settled(page, r + 1); r += 1
    _type(page, 'D (stages)', 5)
    page.wait_for_selector('.chimera-explorer :text("even number of stages")', timeout=90_000)
    assert _plot_paths(page) == _expected_bars('chimera', 8, 8)
    assert page.locator('.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]').count() == 0
    screenshot(page, tmp_path, '4-error.png')
    _type(page, 'D (stages)', 4)
    _settled(page, r + 1); r += 1

    # a save button writes its file next to the notebook and says where
    page.locator('.chimera-explorer button', has_text='CSV').first.click()
    page.wait_for_selector('.chimera-explorer :text("saved")', timeout=90_000)
    saved = lab['root'] / 'explorer-out' / 'chimera-D4-N8.csv'
    from chimera_nb.schedules import make_schedule
    from chimera_nb.ir import Schedule
    wait_for(page, lambda p: saved.exists(), bool, 10, 'the saved CSV')
    assert Schedule.from_csv(saved.read_text()).orders == make_schedule('chimera', 4, 8).orders

    # PNG through kaleido: saved and said so, and nothing else printed (a traceback in the page or the server's log)
    log0 = len(lab['log'].read_text())
    page.locator('.chimera-explorer button', has_text='PNG').first.click()
    png = lab['root'] / 'explorer-out' / 'chimera-D4-N8.png'
    page.wait_for_selector('.chimera-explorer :text("chimera-D4-N8.png")', timeout=90_000)
    assert png.read_bytes()[:8] == b'\x89PNG\r\n\x1a\n'
    page.wait_for_timeout(1000)
    printed = lab['log'].read_text()[log0:]
    print('server log while saving the PNG:', printed[-1500:] or '(nothing)')
    assert 'Traceback' not in printed and '{"' not in printed, printed[-3000:]
    assert page.locator('.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]').count() == 0

    # JupyterLab's dark theme: the page probe tells Python, the figures redraw dark
    page.evaluate("window.jupyterapp.commands.execute('apputils:change-theme', {theme: 'JupyterLab Dark'})")
    ps = wait_for(page, _plots, lambda ps: len(ps) == 2 and all(p['theme'] == 'dark' for p in ps), 60, 'the dark redraw')
    assert all(p['paper'] == 'rgb(17,17,17)' for p in ps), ps
    page.wait_for_timeout(500)
    dark = screenshot(page, tmp_path, '5-dark.png', full=False)
    screenshot(page, tmp_path, '5-dark-memory.png', element=page.locator('.chimera-explorer .js-plotly-plot').nth(1))
    r = _redraw_no(page)
    _settled(page, r)

    print('timings (ms):', timings)   # bounded waits, not a time limit (the largest size, timed: test_explorer_redraws_the_largest_size_in_time)
    print(f"screenshots in {tmp_path}")
    assert dark.stat().st_size > 10_000
    page.evaluate("window.jupyterapp.commands.execute('apputils:change-theme', {theme: 'JupyterLab Light'})")   # the server's setting: the next tests' pages


@pytest.mark.timing
def test_explorer_redraws_the_largest_size_in_time(lab, pages, tmp_path):
    """D = 64, N = 512 (the largest the controls allow) drawn summarised (a raster, no bars) within 60 s, and the next change
    redrawn within 15 s: the page stays usable. Generous on purpose: on this 2-core machine the two take about 3-10 s and
    1-3 s, more under load."""
    page, errors = pages.notebook(lab, 'explorer.ipynb', height=800)
    run_all(page)
    _wait_paths(page, lambda n: n == _expected_bars('chimera', 4, 8))
    r = _redraw_no(page)
    _settled(page, r)
    _type(page, 'D (stages)', 64)           # N = 8 is no multiple of 64: a message, no redraw
    page.wait_for_selector('.chimera-explorer :text("multiple of D=64")', timeout=90_000)
    t = time.time()
    _type(page, 'N (micro-batches)', 512)
    tl_plot, _ = _settled(page, r + 1)
    large = time.time() - t
    assert tl_plot['raster'] == 1 and tl_plot['bars'] == 0, tl_plot
    screenshot(page, tmp_path, 'D64-N512.png', full=False)
    t = time.time()
    _type(page, 'D (stages)', 4)
    _settled(page, r + 2)
    after = time.time() - t
    print(f"D=64, N=512 drawn in {large:.1f} s; the next change in {after:.1f} s")
    assert large < 60 and after < 15, (large, after)


FIT_JS = """() => { const nb = document.querySelector('.jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook').getBoundingClientRect();
  const right = Math.min(nb.right, window.innerWidth), sel = '.widget-button, .widget-dropdown, .widget-inline-hbox, .widget-text, .widget-checkbox, table';
  const box = e => { const r = e.getBoundingClientRect(); return {l: r.left, r: r.right, w: r.width, t: r.top, b: r.bottom}; };
  const shown = e => e.offsetParent !== null && e.getBoundingClientRect().width > 0;
  const seen = e => { if (e.tagName !== 'TABLE') return e;   // a table inside a box that scrolls sideways shows that box
    for (let a = e.parentElement; a && !a.classList.contains('jp-OutputArea-output'); a = a.parentElement)
      if (['auto', 'scroll'].includes(getComputedStyle(a).overflowX) && a.getBoundingClientRect().width < e.getBoundingClientRect().width) return a;
    return e; };
  const controls = Array.from(document.querySelectorAll('.jp-OutputArea-output')).flatMap(o => Array.from(o.querySelectorAll(sel)))
    .filter(shown).map(e => ({text: (e.innerText || e.textContent || '').trim().slice(0, 40), ...box(seen(e))}));
  const plots = Array.from(document.querySelectorAll('.jp-OutputArea-output .js-plotly-plot')).filter(shown).map(e => {
    const svg = e.querySelector('.main-svg'), area = e.closest('.jp-OutputArea-output').getBoundingClientRect();
    const title = e.querySelector('.gtitle'), bar = e.querySelector('.modebar');
    return {svg: svg ? box(svg) : null, area: {l: area.left, r: area.right}, title: title ? {text: title.textContent.slice(0, 60), ...box(title)} : null,
            modebar: bar ? box(bar) : null}; });
  return {nb: {l: nb.left, r: right}, controls, plots, width: window.innerWidth}; }"""


def _misfits(page) -> tuple:
    "Controls, tables and plots of the page's outputs that reach past the notebook or the window, titles clipped or under the toolbar."
    f = page.evaluate(FIT_JS)
    out = [c for c in f['controls'] if c['l'] < f['nb']['l'] - 1 or c['r'] > f['nb']['r'] + 1]
    meet = lambda a, b: a['l'] < b['r'] and b['l'] < a['r'] and a['t'] < b['b'] and b['t'] < a['b']
    plots = [p for p in f['plots'] if p['svg'] is None or p['svg']['r'] > min(p['area']['r'], f['nb']['r']) + 1
             or (p['title'] and (p['title']['r'] > p['svg']['r'] + 1 or p['title']['l'] < p['svg']['l'] - 1))   # a clipped title
             or (p['title'] and p['modebar'] and p['modebar']['w'] > 0 and meet(p['title'], p['modebar']))]      # the toolbar over it
    return out, plots, f


def _fits_at(page, tmp_path, width, name, sidebar:bool):
    "Resize the window to `width` (the file browser open or closed); every control and plot inside the notebook; a screenshot."
    page.set_viewport_size({'width': width, 'height': 900})
    shell = page.evaluate("() => window.jupyterapp.shell.leftCollapsed")
    if shell == sidebar:   # collapsed while it should be open, or the other way round
        page.evaluate("() => window.jupyterapp.commands.execute('application:toggle-left-area')")
    wait_for(page, lambda p: p.evaluate("() => window.jupyterapp.shell.leftCollapsed"), lambda c: c != sidebar, 10, 'the file browser')
    nb_width = lambda p: (lambda f: f['nb']['r'] - f['nb']['l'])(p.evaluate(FIT_JS))   # JupyterLab lays out again: wait for it
    wait_for(page, nb_width, (lambda w: w < width - 250) if sidebar else (lambda w: w > width - 150), 15, f'the notebook at {width} px')
    try: found = wait_for(page, _misfits, lambda m: not m[0] and not m[1], 15, f'the layout at {width} px')
    except AssertionError:
        out, plots, f = _misfits(page)
        screenshot(page, tmp_path, f'fit-{name}-FAILED.png', full=False)
        print('plot boxes (class, width, css width, min-width, style width):', page.evaluate("""() => Array.from(document.querySelectorAll('.jp-OutputArea-output .js-plotly-plot')).map(gd => {
            const chain = []; let e = gd; for (let i = 0; i < 7 && e; i++, e = e.parentElement) chain.push([e.className.slice(0, 50), e.getBoundingClientRect().width, getComputedStyle(e).width, getComputedStyle(e).minWidth, e.style.width]);
            return {chain, lay: gd.layout && [gd.layout.width, gd.layout.autosize], full: gd._fullLayout && gd._fullLayout.width}; })"""))
        raise AssertionError(f"at {width} px: controls outside the notebook {out[:6]}, plots {plots}, notebook {f['nb']}")
    screenshot(page, tmp_path, f'fit-{name}.png', full=False)
    return found[2]


def test_playground_choice_reaches_controls_plot_prediction_and_form(lab, pages, tmp_path):
    "Choose ZB-H1 W=2 D=4 N=8 in the playground: the explorer's controls and plot, the prediction and the SLURM form show it."
    page, errors = pages.notebook(lab, 'playground.ipynb')
    run_all(page)
    choice = page.locator('.widget-dropdown', has_text='configuration').locator('select')
    choice.wait_for(timeout=120_000)
    wait_for(page, lambda p: choice.locator('option').count(), lambda n: n > 5, 120, 'the ranking')
    options = choice.locator('option').evaluate_all('os => os.map(o => o.textContent.replace(/\u00a0/g, " "))')
    label = next((o for o in options if 'zb-h1 W=2 D=4 B=4 N=8' in o and 'recompute' not in o), None)
    assert label is not None, options
    choice.select_option(index=options.index(label))
    ex = page.locator('.chimera-explorer')
    sel = lambda what: ex.locator('.widget-dropdown', has_text=what).locator('select').input_value()
    box = lambda what: ex.locator('.widget-inline-hbox', has_text=what).locator('input').first.input_value()
    wait_for(page, lambda p: (sel('schedule'), box('D (stages)'), box('N (micro-batches)')), lambda v: v == ('zb-h1', '4', '8'), 60, 'the controls')
    wait_for(page, lambda p: ex.locator('.js-plotly-plot .barlayer path').count(), lambda n: n == _playground_bars('zb-h1', 2, 4, 4, 8), 60, 'the plot')
    screenshot(page, tmp_path, 'playground-3-explorer.png', element=ex)
    title = lambda p: p.locator('.js-plotly-plot .gtitle').evaluate_all('ts => ts.map(t => t.textContent)')   # SVG: no innerText
    wait_for(page, title, lambda ts: any('zb-h1' in x and 'predicted' in x for x in ts), 60, 'the prediction')
    screenshot(page, tmp_path, 'playground-1-chosen.png', full=True)
    page.locator('button', has_text='SLURM job').click()
    form = page.locator('.widget-text', has_text='run folder').locator('input')
    form.wait_for(timeout=60_000)
    wait_for(page, lambda p: form.input_value(), lambda v: v.startswith('runs/zb-h1-bert-48-W2D4'), 30, 'the run folder')
    summary = page.locator('.widget-html', has_text='ranks = nodes').first.inner_text()
    assert 'zb-h1' in summary and 'W=2 D=4 B=4 N=8' in summary and 'bfloat16' in summary, summary
    nodes = page.locator('.widget-inline-hbox', has_text='nodes').locator('input').first.input_value()
    gpn = page.locator('.widget-inline-hbox', has_text='GPUs per node').locator('input').first.input_value()
    assert int(nodes) * int(gpn) == 8, (nodes, gpn)
    # the form sits right under the choice it was opened for, not below the whole app
    y = lambda loc: loc.bounding_box()['y']
    assert y(form) < y(ex.locator('.js-plotly-plot').first), 'the form should appear above the explorer, next to its button'
    form.scroll_into_view_if_needed()
    screenshot(page, tmp_path, 'playground-2-form.png', full=False)

    # fits the window: 1280 px with the file browser open, 800 px, 1920 px: every control and plot inside the notebook
    page.locator('.widget-button', has_text='Tune').scroll_into_view_if_needed()
    seen = {}
    for width, name, sidebar in ((1280, '1280-filebrowser', True), (800, '800', False), (1920, '1920', False)):
        f = _fits_at(page, tmp_path, width, name, sidebar)
        seen[name] = (len(f['controls']), len(f['plots']), round(f['nb']['r'] - f['nb']['l']))
    print('fits (controls, plots, notebook px):', seen)
    print(f"screenshots in {tmp_path}")


RERUN = 'run this cell again'


def test_explorer_survives_reload(lab, pages, tmp_path):
    "Reload the page: the displayed explorer redraws from its models; restart the kernel and reload: one line says what to re-run."
    page, errors = pages.notebook(lab, 'reload.ipynb')
    run_all(page)
    page.wait_for_selector('.chimera-explorer .js-plotly-plot .barlayer path', timeout=120_000)
    wait_for(page, _timing_ms, lambda v: v is not None, 60, 'the status timing')
    hint = page.locator('.chimera-rerun')
    assert hint.count() == 1 and not hint.is_visible()          # the live explorer hides its re-run line
    page.keyboard.press('Control+s')                              # outputs saved: a reload shows them again
    wait_for(page, lambda p: p.locator('.jp-mod-dirty').count(), lambda n: n == 0, 30, 'the save')

    t = time.time()                                               # 1. reload, kernel alive: drawn from the models
    bars = lambda p: p.locator('.chimera-explorer .js-plotly-plot').first.locator('.barlayer path').count()
    _, reloads = reload_until(page, bars, lambda n: n == _expected_bars('chimera', 4, 8), 60, 'the timeline after a reload')
    wait_for(page, _timing_ms, lambda v: v is not None, 30, 'the status timing after the reload')
    reload_s = time.time() - t
    text = page.locator('.jp-OutputArea').first.inner_text()
    assert 'drawing in the browser' not in text, text[-500:]
    assert not page.locator('.chimera-rerun').is_visible()
    screenshot(page, tmp_path, 'reload-1-redrawn.png', full=False)

    restart_kernel(page)   # 2. restart, reload
    line = page.locator('.chimera-rerun')
    line.wait_for(state='visible', timeout=60_000)                 # restarted, not reloaded: beside the broken widgets, what to do
    screenshot(page, tmp_path, 'reload-2-restarted-not-reloaded.png', full=False)
    page.reload()
    page.wait_for_selector('.jp-Notebook .jp-Cell', timeout=90_000)
    line.wait_for(state='visible', timeout=60_000)                 # says what to re-run, in one line
    assert RERUN in line.inner_text() and line.bounding_box()['height'] < 40, line.inner_text()
    assert page.locator('.chimera-explorer .js-plotly-plot').count() == 0
    screenshot(page, tmp_path, 'reload-2-after-restart.png', full=False)
    run_all(page)                                                 # re-running draws it again, and hides the line
    _wait_paths(page, lambda n: n == _expected_bars('chimera', 4, 8), 120)
    wait_for(page, lambda p: line.is_visible(), lambda v: not v, 30, 'the hidden re-run line')
    print(f"reload to a timed redraw: {reload_s:.1f} s ({reloads} reload(s), redrawn by the restorer: "
          f"{sum('[chimera] redrew' in e for e in errors)}); screenshots in {tmp_path}")
    assert not [e for e in errors if 'could not redraw' in e], errors
    if [e for e in errors if 'Failed to initialize' in e]:   # anywidget's 2 s start-up limit: the probe still reports
        print('anywidget gave up starting the page probe under load; the timing came all the same')


@pytest.fixture
def cpu_hog():
    "A process burning one core beside the browser for the test's length: the reload must not depend on a fast machine."
    hog = subprocess.Popen([sys.executable, '-c', 'while True: pass'], start_new_session=True)
    try: yield hog
    finally:
        hog.kill(); hog.wait(10)


PLAYGROUND_RELOAD = {**NOTEBOOK, "cells": [
    {"cell_type": "code", "execution_count": None, "id": "app", "metadata": {}, "outputs": [],
     "source": "from chimera_nb.playground import Playground\napp = Playground('bert-48', 'b200', 8, 64, micro_batch_sizes=(4,))\napp.tune()\napp"}]}


def _playground_state(page) -> dict:
    "What the playground's widgets show: the ranking's rows, the explorer's controls and bars, the memory table, the breakdown, the form."
    ex = page.locator('.chimera-explorer')
    sel = lambda what: ex.locator('.widget-dropdown', has_text=what).locator('select').input_value(timeout=5000)   # polled: fail fast
    box = lambda what: ex.locator('.widget-inline-hbox', has_text=what).locator('input').first.input_value(timeout=5000)
    titles = page.locator('.js-plotly-plot .gtitle').evaluate_all('ts => ts.map(t => t.textContent)')
    form = page.locator('.widget-text', has_text='run folder').locator('input')
    return dict(rows=page.locator('.widget-html table').first.locator('tbody tr').count(),
                controls=(sel('schedule'), box('D (stages)'), box('N (micro-batches)')),
                bars=ex.locator('.js-plotly-plot').first.locator('.barlayer path').count(),
                memory='Memory per GPU' in page.locator('.jp-OutputArea').first.inner_text(),
                breakdown=[t for t in titles if 'predicted iteration' in t],
                form=form.input_value(timeout=5000) if form.count() else None)


def test_every_playground_widget_survives_reload_under_load(lab, pages, tmp_path, cpu_hog):
    "Choose a row, open its SLURM form, reload the page with a core busy: the ranking, explorer, memory, breakdown and form come back as chosen."
    page, errors = pages.notebook(lab, 'playground-reload.ipynb')
    run_all(page)
    choice = page.locator('.widget-dropdown', has_text='configuration').locator('select')
    wait_for(page, lambda p: choice.locator('option').count(), lambda n: n > 5, 180, 'the ranking')
    options = choice.locator('option').evaluate_all('os => os.map(o => o.textContent.replace(/\u00a0/g, " "))')
    label = next(o for o in options if 'zb-h1 W=2 D=4 B=4 N=8' in o and 'recompute' not in o)
    choice.select_option(index=options.index(label))   # not the first row: a reload must not fall back to it
    bars = _playground_bars('zb-h1', 2, 4, 4, 8)
    chosen = lambda s: (s['controls'] == ('zb-h1', '4', '8') and s['bars'] == bars and s['memory']
                        and any('zb-h1' in t for t in s['breakdown']))
    wait_for(page, _playground_state, chosen, 120, 'the choice')
    page.locator('button', has_text='SLURM job').click()
    wait_for(page, _playground_state, lambda s: (s['form'] or '').startswith('runs/zb-h1-bert-48-W2D4'), 60, 'the form')
    before = _playground_state(page)
    page.keyboard.press('Control+s')
    wait_for(page, lambda p: p.locator('.jp-mod-dirty').count(), lambda n: n == 0, 30, 'the save')

    restored = lambda s: chosen(s) and s['form'] == before['form'] and s['rows'] == before['rows']
    after, reloads = reload_until(page, _playground_state, restored, 120, 'every widget redrawn from its model')
    screenshot(page, tmp_path, 'playground-reloaded.png', full=True)
    print(f"{reloads} reload(s); redrawn by the restorer: {sum('[chimera] redrew' in e for e in errors)}; "
          f"anywidget start-up errors: {sum('Failed to initialize' in e for e in errors)}")
    assert not [e for e in errors if 'could not redraw' in e], errors
    print(f"before {before}\nafter  {after}\nscreenshots in {tmp_path}")


def _run_app_notebook(lab, pages, tmp_path, name:str) -> tuple:
    "Run All on notebook `name` (the one `chimera-nb lab` writes); (its page, the seconds from its cell finishing to the first timeline drawn)."
    page, errors = pages.notebook(lab, name)
    page.evaluate(APP_TIMING_JS)
    run_all(page)
    t = wait_for(page, lambda p: p.evaluate('() => window.__appTiming'), lambda t: 'done' in t and 'drawn' in t, 180, 'the app')
    lag = max(0.0, t['drawn'] - t['done']) / 1000
    screenshot(page, tmp_path, 'app-notebook.png', full=True)
    print(f"first drawing {lag:.2f} s after the cell finished; screenshots in {tmp_path}")
    return page, lag


def test_app_notebook_opens_draws_and_keeps_its_outputs(lab, pages, tmp_path):
    "The notebook `chimera-nb lab` wrote: Run All draws the app's timeline and breakdown; saved, it keeps its outputs."
    nb = lab['root'] / 'chimera-playground.ipynb'
    assert nb.exists(), 'chimera-nb lab did not write the playground notebook'
    page, _ = _run_app_notebook(lab, pages, tmp_path, nb.name)   # drawn: its time is the timing tier's (below)
    title = lambda p: p.locator('.js-plotly-plot .gtitle').evaluate_all('ts => ts.map(t => t.textContent)')
    wait_for(page, title, lambda ts: any('predicted' in x for x in ts), 60, 'the breakdown')
    page.keyboard.press('Control+s')
    wait_for(page, lambda p: p.locator('.jp-mod-dirty').count(), lambda n: n == 0, 30, 'the save')
    saved = json.loads(nb.read_text())
    outs = [o for c in saved['cells'] if c['cell_type'] == 'code' for o in c.get('outputs', [])]
    assert any('application/vnd.jupyter.widget-view+json' in o.get('data', {}) for o in outs), 'the saved notebook lost its outputs'


@pytest.mark.timing
def test_app_notebook_draws_within_3s(lab, pages, tmp_path, notebooks):
    """The app's first timeline within 3 s of its cell finishing (a fresh copy of the notebook `chimera-nb lab` writes).
    Measured here at 0.2-1.5 s idle; the bound leaves room for a loaded machine, not for the 2 s anywidget start-up failure."""
    fresh = lab['root'] / 'chimera-playground-timed.ipynb'
    fresh.write_text(notebooks)
    _, lag = _run_app_notebook(lab, pages, tmp_path, fresh.name)
    assert lag < 3, f"the first timeline came {lag:.1f} s after the app's cell finished (want < 3 s)"


APP = {**NOTEBOOK, "cells": [
    {"cell_type": "code", "execution_count": None, "id": "app", "metadata": {}, "outputs": [],
     "source": "from chimera_nb.playground import Playground\napp = Playground('bert-48', 'b200', 8, 64, micro_batch_sizes=(4,))\napp.tune()\napp"}]}

PAINTED_JS = """() => Array.from(document.querySelectorAll('.jp-OutputArea .js-plotly-plot')).map(gd => ({
    explorer: !!gd.closest('.chimera-explorer'), redraw: gd.layout && gd.layout.meta ? gd.layout.meta.redraw : null,
    title: (gd.querySelector('.gtitle') || {}).textContent || '',
    points: (gd._fullData || []).filter(t => t.type === 'bar').reduce((n, t) => n + (t.x ? t.x.length : 0), 0), paths: gd.querySelectorAll('.barlayer path').length}))"""


def _painted(page, last=None):
    "The app's two plots, each painted whole: the timeline (every bar of its data, a redraw after `last`) and the breakdown."
    ps = page.evaluate(PAINTED_JS)
    tl = [p for p in ps if p['explorer']]
    bd = [p for p in ps if not p['explorer'] and 'predicted' in p['title']]
    ok = len(tl) == 1 and tl[0]['paths'] == tl[0]['points'] > 0 and (last is None or (tl[0]['redraw'] or 0) > last) \
         and len(bd) == 1 and bd[0]['paths'] > 0
    return (tl[0]['redraw'] if ok else None), ps


@pytest.mark.slow   # about 4 minutes: the load is the point (make test-extra runs it, after the rest)
@pytest.mark.timeout(900)
def test_app_draws_every_plot_in_a_6x_throttled_browser_beside_a_cpu_hog(lab, pages, tmp_path):
    """Chromium's CPU throttled 6x (DevTools' Emulation.setCPUThrottlingRate) and a process spinning on a core beside it: the
    app from a fresh kernel paints its timeline (every bar) and breakdown 5 times in a row; a row change redraws, and
    "nothing fits" empties both plots, 3 times each. Plotly's FigureWidget (an anywidget with a 2 s start-up limit) failed
    this: its first drawing never came."""
    import subprocess, sys
    (lab['root'] / 'app-load.ipynb').write_text(json.dumps(APP))
    hog = subprocess.Popen([sys.executable, '-c', 'while True: pass'])
    try:
        times, logs, runs = [], [], int(os.environ.get('CHIMERA_THROTTLED_RUNS', 5))
        for i in range(runs):
            close_sessions(lab)   # a fresh kernel each time: the notebook opened anew, its app made from nothing
            page, errors = pages.notebook(lab, 'app-load.ipynb'); logs.append(errors)
            page.context.new_cdp_session(page).send('Emulation.setCPUThrottlingRate', {'rate': float(os.environ.get('CHIMERA_CPU_THROTTLE', 6))})
            t = time.time()
            run_all(page)
            redraw = wait_for(page, _painted, lambda r: r[0] is not None, 240, f'both plots painted (fresh kernel {i + 1})')[0]
            times.append(time.time() - t)
            if i < 3:   # a row change redraws the timeline; nothing fits empties both plots; fitting again draws both
                page.locator('.widget-dropdown', has_text='configuration').locator('select').select_option(index=1)
                redraw = wait_for(page, lambda p, last=redraw: _painted(p, last), lambda r: r[0] is not None, 180, 'the next row painted')[0]
                box = page.locator('.widget-inline-hbox', has_text='GiB/GPU').locator('input').first
                box.fill('0.01'); box.press('Enter'); page.locator('button', has_text='Tune').click()
                wait_for(page, lambda p: len(p.evaluate(PAINTED_JS)), lambda n: n == 0, 180, 'no plot left when nothing fits')
                assert 'Nothing fits' in page.locator('.jp-OutputArea').first.inner_text()
                box.fill('0'); box.press('Enter'); page.locator('button', has_text='Tune').click()
                wait_for(page, _painted, lambda r: r[0] is not None, 180, 'both plots again')
            if i < runs - 1: page.close()
        screenshot(page, tmp_path, 'app-throttled.png', element=page.locator('.chimera-explorer .js-plotly-plot').first)   # the last timeline, painted
        failed = sum('Failed to initialize model' in e for errors in logs for e in errors)
        print(f"fresh kernel to both plots painted, CPU throttled 6x beside a hog: {', '.join(f'{s:.1f}' for s in times)} s; "
              f"anywidget start-up failures {failed} (the page probe's; every plot painted all the same); screenshots in {tmp_path}")
    finally:
        hog.kill(); hog.wait()
