"""What the suite shares: its tiers and one of each expensive service per test session (per xdist worker).

Tiers (markers, declared in pyproject.toml):
- `browser`: drives JupyterLab or a page in headless Chromium. `make test` runs these after the rest, alone, so a
  reload is never timed beside the other tests.
- `slurm`: needs the local SLURM cluster. They also carry `xdist_group('slurm')` (`--dist loadgroup`), so one worker starts one
  cluster: two clusters would give two jobs the same id, so the same rendezvous port, and their ranks would meet.
- `timing`: asserts a wall-clock bound. Only `make test-all` runs them, alone (`make test-timing`).
- `slow`: a longer form of something the default tier checks in short. `fuzz` (every Hypothesis test, marked here) and
  `experiment` (the experiment notebooks) run again in `make test-all` at full size: all examples, the notebooks' runs.

Services, each started on first use and stopped at the end: `cluster` (munged, slurmctld, slurmd on localhost),
`jupyter` (one JupyterLab; the `lab` fixture shuts earlier tests' kernels down first), `browser` (one Chromium; each
`pages` page is a fresh browser context, and a failing test prints its pages' errors and leaves a screenshot)."""
import os, resource, sys
from pathlib import Path
import pytest

sys.path.insert(0, str(Path(__file__).parent))
import tiers   # loads the Hypothesis profile before any test module builds its settings
import slurm_cluster
from lab_server import jupyter_lab, close_sessions, chromium, open_notebook, screenshot


def pytest_collection_modifyitems(config, items):
    for item in items:
        if getattr(item.obj, 'is_hypothesis_test', False): item.add_marker(pytest.mark.fuzz)
        # one cluster: a slurm test must carry xdist_group('slurm') in its module (a marker added here comes after xdist read them)
        assert not item.get_closest_marker('slurm') or item.get_closest_marker('xdist_group'), f"{item.nodeid}: add xdist_group('slurm')"
    # the SLURM group first: its worker spends minutes waiting on jobs, which then overlap every other test
    items.sort(key=lambda item: item.get_closest_marker('slurm') is None)


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item, call):
    "Keep each phase's report on the test item: the `pages` fixture looks at the call's to know whether the test failed."
    rep = yield
    setattr(item, f'rep_{rep.when}', rep)
    return rep


def _cpu_seconds() -> float:
    "CPU seconds of this process (all its threads) and of the children it has waited for (ranks, subprocesses)."
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


@pytest.fixture(autouse=True)
def cpu_seconds(record_property):
    "Each test's CPU seconds in the JUnit report beside its wall time (tools/slowest.py shows both): what a test costs the cores."
    before = _cpu_seconds()
    yield
    record_property('cpu_s', round(_cpu_seconds() - before, 1))


@pytest.fixture(scope='session')
def cluster(tmp_path_factory):
    "One single-node SLURM cluster for the session, SLURM_CONF pointing at it (sbatch and the jobs read it)."
    if why := slurm_cluster.why_not(): pytest.skip(f"no local SLURM cluster: {why}")
    c = slurm_cluster.LocalCluster(tmp_path_factory.mktemp('slurm'))
    old = os.environ.get('SLURM_CONF')
    os.environ['SLURM_CONF'] = c.env['SLURM_CONF']
    try: yield c.start()
    finally:
        c.stop()
        if old is None: os.environ.pop('SLURM_CONF', None)
        else: os.environ['SLURM_CONF'] = old


@pytest.fixture(scope='session')
def jupyter(tmp_path_factory):
    "One JupyterLab for the session, started as `chimera-nb lab` starts it, serving a temp root the tests write notebooks into."
    tmp = tmp_path_factory.mktemp('lab')
    (tmp / 'root').mkdir()
    with jupyter_lab(tmp / 'root', tmp) as server: yield server


@pytest.fixture
def lab(jupyter):
    "The session's JupyterLab with no kernel left running by an earlier test: each browser test runs beside its own kernels only."
    close_sessions(jupyter)
    return jupyter


@pytest.fixture(scope='session')
def browser():
    "One headless Chromium for the session (skipped where Chromium or Playwright is missing)."
    with chromium() as b: yield b


class Pages:
    "Pages of the session's browser, each in a fresh context, with the console errors they logged."
    def __init__(self, browser): self.browser, self.opened = browser, []

    def notebook(self, lab, name:str, width:int=1280, height:int=900) -> tuple:
        "A page with notebook `name` open in `lab`, its kernel idle; (page, errors)."
        page, errors = open_notebook(self.browser, lab, name, width, height)
        self.opened.append((page, errors))
        return page, errors

    def blank(self, width:int=1280, height:int=900) -> tuple:
        "An empty page; (page, errors)."
        page, errors = self.browser.new_page(viewport={'width': width, 'height': height}), []
        page.on('pageerror', lambda e: errors.append(str(e)))
        self.opened.append((page, errors))
        return page, errors


@pytest.fixture
def pages(request, browser, tmp_path):
    "Opens pages for one test; when the test fails, prints each page's last errors and screenshots it into tmp_path."
    p = Pages(browser)
    yield p
    rep = getattr(request.node, 'rep_call', None)
    for i, (page, errors) in enumerate(p.opened):
        if rep is not None and rep.failed:
            print(f'page {i} errors:', *errors[-20:], sep='\n  ')
            try: print('failure screenshot:', screenshot(page, tmp_path, f'failure-{i}.png'))
            except Exception as e: print(f'no failure screenshot of page {i}: {type(e).__name__}: {e}')
        page.context.close()
