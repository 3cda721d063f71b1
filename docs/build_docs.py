"""Build the static documentation site: the notebooks as nbdev renders them, with their outputs, and one API page per module.

    python docs/build_docs.py                       # build/docs/ (the pages) and _site/ (the site); what `make docs` runs
    python docs/build_docs.py --execute 02_viz      # execute only these notebooks (the docs test); the others carry a note
    python docs/build_docs.py --execute none        # no notebook executed (a minute: for layout work)
    python docs/build_docs.py --notebooks 00_schedules 02_viz   # these notebook pages only, the index and API pages (the docs test)

Open `_site/index.html` in a browser: the site works from the files (file://), offline, with search. One line why per choice:
- mkdocs-material + mkdocs-jupyter, not Quarto: Quarto (nbdev's renderer) cannot be installed offline.
- nbdev's own processors (`nbdev.process.NBProcessor` with `nbdev.processors`' add_show_docs, hide_line, rm_header_dash,
  rm_export, clean_magics, hide_, strip_ansi, strip_hidden_metadata), so a page reads as nbdev renders it: `#|` directive
  lines stripped; `#| hide`, `#| default_exp`, `#| export`, `#| exporti` cells dropped, each exported function or class
  shown by its `show_doc` (signature with the parameters' comments, docstring) in place of its code (`#| exports` keeps
  the code as well); `#| eval: false` cells shown, not run.
- test cells hidden (nbdev shows them; its users hide them by hand): a cell that is not exported, checks something
  (`assert`, `test_*(...)`, `with ...raises(...)`) and shows nothing (no last expression, no print,
  display or .show()) is the notebook's test, not its documentation; a checking cell that shows something stays.
- executed at build time with nbclient (a kernel per notebook, run from nbs/ as nbdev-test runs them, each cell
  limited to CELL_TIMEOUT s and each notebook to NB_TIMEOUT s, errors shown in the page and counted on stderr): the
  repository keeps its notebooks clean, so outputs exist only if the build makes them. Executed notebooks are cached in
  build/docs-cache/ by the hash of the notebook and of the package's sources, so a rebuild runs only what changed.
- every notebook is executed (about 15 minutes on 2 cores, then cached); one listed in NOT_EXECUTED, or left out by
  `--execute`, shows its code without outputs under a note that says why.
- plotly figures: their JSON output becomes HTML drawn by plotly.min.js, copied from the installed plotly package into
  the site and loaded once per page that has a figure: no CDN, the site works offline.
- ipywidgets need a live kernel: an app's output (the playground, the SLURM form) is replaced by a note saying so, a
  tqdm progress bar (a widget too) is dropped.
- search from file://: mkdocs-material's `offline` plugin inlines the index into search/search_index.js; the web
  worker that runs the search needs iframe-worker's shim on file://, vendored as
  docs/assets/javascripts/iframe-worker-shim.js (MIT) instead of the CDN copy the plugin would link. Web fonts off (the
  theme would fetch them from the network).
- the sidebar scrolls: material's script sizes it to the window, and it stopped at the missing search_index.js (an
  error on file://), leaving the 1,800 px navigation unscrollable; with the index there the script runs on.

The API pages come from the code: every name in each module's `__all__`, with its signature, docstring and the
parameter comments that fastcore's `docments` reads (the same comments nbdev's `show_doc` renders)."""
import argparse, ast, hashlib, importlib, inspect, json, os, pkgutil, re, shutil, sys, time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
STAGE = ROOT / 'build' / 'docs'
CACHE = ROOT / 'build' / 'docs-cache'
ASSETS = Path(__file__).resolve().parent / 'assets'
CELL_TIMEOUT, NB_TIMEOUT = 300, 600   # seconds: one cell, one notebook (the slowest, 21_exp_bert, takes 1-2 minutes)
# notebooks not executed for the site, {stem: the reason its page shows}. None at present: measured on 2 cores, every
# notebook runs in under 2 minutes (10_slurm fakes sbatch; the experiments 20-22 run their FAST settings, 1-2 minutes
# each), all of them in about 15 minutes; the cache makes a rebuild re-run only what changed.
NOT_EXECUTED: dict = {}
SKIP_FLAGS = ('notest', 'slow')   # cells the project's tests skip (pyproject's tst_flags) are not run for the site either
PLOTLY_MIME, WIDGET_MIME = 'application/vnd.plotly.v1+json', 'application/vnd.jupyter.widget-view+json'
_PROGRESS = re.compile(r'\d+%\|.*\| *[\d.]+\w?/[\d.]+\w? \[')   # tqdm's text: 'profiling:  33%|###3      | 2/6 [00:01<...'


def _cell(v) -> str:
    "A value for a markdown table cell: one line, pipes escaped."
    s = '' if v is None or v is inspect.Parameter.empty else (v.__name__ if isinstance(v, type) else str(v))
    return s.replace('|', '\\|').replace('\n', ' ')


def _signature(name:str, obj) -> str:
    try: return f"{name}{inspect.signature(obj)}"
    except (TypeError, ValueError): return name


def _params(obj) -> str:
    "A markdown table of `obj`'s parameters: type, default and the comment written beside each (fastcore.docments)."
    from fastcore.docments import docments
    try: d = docments(obj, full=True)
    except Exception: return ''
    rows = [(k, v) for k, v in d.items() if k not in ('return', 'self')]
    if not rows: return ''
    out = ['| parameter | type | default | meaning |', '|---|---|---|---|']
    for k, v in rows:
        default = v.get('default', inspect.Parameter.empty)
        out.append(f"| `{k}` | {_cell(v.get('anno'))} | {'' if default is inspect.Parameter.empty else '`' + _cell(repr(default)) + '`'} "
                   f"| {_cell(v.get('docment'))} |")
    return '\n'.join(out) + '\n'


def _entry(name:str, obj, level:int=2) -> str:
    "The markdown of one public name: heading, signature, docstring, parameters (classes: their public methods too)."
    h = '#' * level
    text = [f"{h} {name}\n", f"```python\n{_signature(name, obj)}\n```\n", inspect.getdoc(obj) or '', '', _params(obj)]
    if inspect.isclass(obj):
        for m, f in vars(obj).items():
            if m.startswith('_') or not (inspect.isfunction(f) or isinstance(f, property)) or not inspect.getdoc(f): continue
            if isinstance(f, property): text.append(f"{h}# {name}.{m} (property)\n\n{inspect.getdoc(f)}\n")
            else: text.append(_entry(f"{name}.{m}", f, level + 1))
    return '\n'.join(text) + '\n'


def api_page(modname:str) -> str|None:
    "The API page of module `modname` (None when it has no `__all__` or does not import here)."
    try: mod = importlib.import_module(modname)
    except Exception as e:
        print(f"  {modname}: not documented, it does not import here ({type(e).__name__}: {e})", file=sys.stderr)
        return None
    names = getattr(mod, '__all__', None)
    if not names: return None
    doc = (inspect.getdoc(mod) or '').split('\n\nDocs:')[0]
    body = [f"# {modname}\n", doc, '']
    objs = [(n, getattr(mod, n)) for n in names if hasattr(mod, n)]
    code = lambda o: inspect.isfunction(o) or inspect.isclass(o) or inspect.ismethod(o)
    body += [_entry(n, o) for n, o in objs if code(o)]
    consts = [(n, repr(o)) for n, o in objs if not code(o)]
    if consts:
        body += ['## Constants\n', '| name | value |', '|---|---|']
        body += [f"| `{n}` | `{_cell(r[:160] + ('…' if len(r) > 160 else ''))}` |" for n, r in consts]
    return '\n'.join(body) + '\n'


# ---------------------------------------------------------------------------------------------------------------------
# Executing a notebook

def _directives(src:str) -> dict:
    "The `#| name args` lines of a code cell's source, as {name: args}."
    from fastcore.nbio import NbCell
    return NbCell(0, {'cell_type': 'code', 'source': src, 'metadata': {}}).directives


def _source_hash() -> str:
    "A hash of what an executed notebook's outputs depend on besides the notebook: the package's sources."
    h = hashlib.sha256()
    for p in sorted((ROOT / 'chimera_nb').rglob('*.py')): h.update(p.name.encode()); h.update(p.read_bytes())
    return h.hexdigest()[:16]


def execute(path:Path, use_cache:bool=True, pkg_hash:str='') -> tuple:
    "Notebook `path` executed from nbs/ (an nbformat node), and a line saying how it went; from the cache when unchanged."
    import nbformat
    from nbclient import NotebookClient
    key = hashlib.sha256(path.read_bytes() + pkg_hash.encode()).hexdigest()[:16]
    cached = CACHE / f"{path.stem}-{key}.ipynb"
    if use_cache and cached.exists():
        nb = nbformat.read(cached, as_version=4)
        return nb, nb.metadata.get('docs_execution', {}).get('summary', 'cached') + ' (cached)'
    nb = nbformat.read(path, as_version=4)
    for c in nb.cells:
        if c.cell_type != 'code': continue
        d = _directives(c.source)
        if d.get('eval', '').strip().lower() == 'false' or d.keys() & set(SKIP_FLAGS):
            c.metadata.setdefault('tags', []).append('skip-execution')
    t0 = time.monotonic()

    class Client(NotebookClient):
        "Stops running cells once the notebook's time is up; the cells left show their code only."
        stopped_at = None
        async def async_execute_cell(self, cell, cell_index, *args, **kwargs):
            if time.monotonic() - t0 > NB_TIMEOUT:
                if self.stopped_at is None: self.stopped_at = cell_index
                return cell
            return await super().async_execute_cell(cell, cell_index, *args, **kwargs)

    timeout_error = {'ename': 'CellTimeoutError', 'evalue': f'stopped: the cell ran over the docs build limit of {CELL_TIMEOUT} s'}
    cl = Client(nb, kernel_name='python3', allow_errors=True, record_timing=False,   # widget state kept: nbclient's Output widget needs it
                timeout_func=lambda cell: max(1, min(CELL_TIMEOUT, NB_TIMEOUT - (time.monotonic() - t0))),
                interrupt_on_timeout=True, error_on_timeout=timeout_error,
                resources={'metadata': {'path': str(ROOT / 'nbs')}})
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get('PYTHONPATH', '')]).rstrip(os.pathsep))
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / 'kernels.log', 'a') as log:   # what kernels print outside their cells (warnings, libraries' noise)
        log.write(f"--- {path.name}\n"); log.flush()
        try: cl.execute(env=env, stdout=log, stderr=log)
        except Exception as e:   # the kernel died or could not start: the page says so
            cl.stopped_at = cl.stopped_at if cl.stopped_at is not None else -1
            nb.metadata['docs_execution_failure'] = f"{type(e).__name__}: {str(e)[:300]}"
    errors = sum(o.output_type == 'error' for c in nb.cells if c.cell_type == 'code' for o in c.get('outputs', []))
    secs = time.monotonic() - t0
    summary = f"executed in {secs:.0f} s" + (f", {errors} cell error(s)" if errors else '')
    if cl.stopped_at is not None:
        summary += f", stopped at cell {cl.stopped_at} after {NB_TIMEOUT} s" if cl.stopped_at >= 0 else f", failed: {nb.metadata['docs_execution_failure']}"
        nb.metadata['docs_stopped'] = summary
    nb.metadata['docs_execution'] = {'summary': summary}
    nb.metadata.pop('widgets', None)
    for c in nb.cells:
        tags = c.metadata.get('tags', [])
        if 'skip-execution' in tags: tags.remove('skip-execution')
        if not tags: c.metadata.pop('tags', None)
    if use_cache and cl.stopped_at is None:
        for old in CACHE.glob(f"{path.stem}-*.ipynb"): old.unlink()
        nbformat.write(nb, cached)
    return nb, summary


# ---------------------------------------------------------------------------------------------------------------------
# nbdev's processing, with the site's own processors

_TEST_CALL = re.compile(r'^(test_\w*|assert_\w*)$')
_RAISES = re.compile(r'raises|Expected|warns|fail', re.I)


def _call_name(node) -> str:
    f = node.func if isinstance(node, ast.Call) else None
    return f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ''


def _checks(stmts) -> bool:
    "Whether any of `stmts` (or a block inside one) is a check: assert, test_*(...), with ...raises(...)."
    for s in stmts:
        if isinstance(s, ast.Assert): return True
        if isinstance(s, ast.Expr) and _TEST_CALL.match(_call_name(s.value)): return True
        if isinstance(s, (ast.With, ast.AsyncWith)) and any(_RAISES.search(_call_name(i.context_expr)) for i in s.items): return True
        inner = [b for f in ('body', 'orelse', 'finalbody') for b in getattr(s, f, []) if isinstance(b, ast.stmt)]
        inner += [b for h in getattr(s, 'handlers', []) for b in h.body]
        if inner and _checks(inner): return True
    return False


def is_test_cell(source:str) -> bool:
    "A cell (its source without directives) that checks something and shows nothing: the notebook's test, not its docs."
    try: tree = ast.parse(source)
    except SyntaxError: return False
    if not tree.body or not _checks(tree.body): return False
    last = tree.body[-1]
    if isinstance(last, ast.Expr) and not _TEST_CALL.match(_call_name(last.value)) and not source.rstrip().endswith(';'):
        return False   # its last expression is displayed
    shows = {'print', 'display', 'show', 'pprint'}
    return not any(isinstance(n, ast.Call) and _call_name(n) in shows for n in ast.walk(tree))


def hide_tests(cell):
    "Drop test cells (`is_test_cell`) that are not exported."
    if cell.cell_type == 'code' and not cell.directives_.keys() & {'export', 'exports', 'exec_doc'} and is_test_cell(cell.source):
        del cell['source']


def quarto_directives(cell):
    "The Quarto cell options nbdev leaves to Quarto: `include: false` drops the cell, `echo: false` its code, `output: false` its outputs."
    if cell.cell_type != 'code': return
    d = {k: str(v).strip().lower() for k, v in cell.directives_.items()}
    if d.get('include') == 'false': del cell['source']; return
    if d.get('output') == 'false': cell.outputs = []
    if d.get('echo') == 'false': cell.metadata['transient'] = {'remove_source': True}   # what nbconvert's templates read


def _doc_markdown(obj, name:str) -> str:
    """nbdev's show_doc of `obj` as markdown; where it fails (e.g. an annotation naming a module imported only in a
    function), the same layout from `inspect`: heading, signature, docstring."""
    from nbdev.showdoc import show_doc
    try: md = show_doc(obj)._repr_markdown_()
    except Exception:
        try: sig = str(inspect.signature(obj))
        except (TypeError, ValueError): sig = ''
        doc = inspect.getdoc(obj) or ''
        md = (f"---\n\n### {name}\n\n```python\n{'class' if inspect.isclass(obj) else 'def'} {name.split('.')[-1]}{sig}\n```\n\n"
              + (f"*{doc}*" if doc and '\n' not in doc else doc))
    # the source link points at a remote host (with Quarto's {target=...} attribute syntax): not for an offline site
    return re.sub(r'^\[source\]\(.*$\n?', '', md, flags=re.M)


def _show_doc_markdown(expr:str, modules:list) -> str|None:
    """The show_doc markdown of `expr` (a name as add_show_docs writes it, or the argument of a show_doc(...) cell), from
    the first module in `modules` where it evaluates; None if none."""
    for m in modules:
        try: obj = eval(expr, vars(importlib.import_module(m)))
        except Exception: continue
        return _doc_markdown(obj, expr)
    return None


class render_show_docs:
    "show_doc cells (added by nbdev's add_show_docs, or written in the notebook) become markdown cells of their output."
    def __init__(self, nb): self.nb = nb
    def begin(self):
        default = next((c.directives_['default_exp'].split()[0] for c in self.nb.cells
                        if c.cell_type == 'code' and 'default_exp' in c.directives_), None)
        mods = [f'chimera_nb.{default}'] if default else []
        for c in self.nb.cells:
            if c.cell_type == 'code' and c.directives_.keys() & {'export', 'exports', 'exporti'}:
                target = next((v.split()[0] for k, v in c.directives_.items() if k.startswith('export') and v.strip()), None)
                mods = ([f'chimera_nb.{target}'] if target else []) + ([f'chimera_nb.{default}'] if default else [])
            if c.cell_type == 'code' and (getattr(c, 'has_sd', False) or c.source.startswith('show_doc(')):
                try: call = ast.parse(c.source.strip()).body[0].value   # show_doc(X, ...): X
                except Exception: continue
                if not (isinstance(call, ast.Call) and call.args): continue
                expr = ast.unparse(call.args[0])
                md = _show_doc_markdown(expr, mods + ['chimera_nb'])
                if md is None:   # one the notebook wrote keeps what its kernel showed; one add_show_docs added goes
                    print(f"    show_doc({expr}): not found in {mods + ['chimera_nb']}", file=sys.stderr)
                    if getattr(c, 'has_sd', False): del c['source']
                    continue
                c.cell_type, c.source, c.metadata = 'markdown', md, {}
                for k in ('outputs', 'execution_count'): c.pop(k, None)
    def __call__(self, cell): pass


class static_outputs:
    "Outputs a static page can show: plotly figures as HTML (plotly.min.js, at `js`, once per page), widgets as a note."
    js = 'assets/javascripts/plotly.min.js'
    def __init__(self, nb): self.nb, self.figures = nb, 0
    def __call__(self, cell):
        if cell.cell_type != 'code': return
        from fastcore.basics import AttrDict
        outs = []
        for o in cell.get('outputs', []):
            data = o.get('data', {})
            if PLOTLY_MIME in data:
                import plotly.io as pio
                html = pio.to_html(data[PLOTLY_MIME], include_plotlyjs=False, full_html=False, validate=False,
                                   default_width='100%', config={'displaylogo': False, 'responsive': True})
                if not self.figures: html = f'<script src="{self.js}"></script>\n' + html
                self.figures += 1
                o = AttrDict(output_type='display_data', data={'text/html': html}, metadata={})
            elif WIDGET_MIME in data and _PROGRESS.search(str(data.get('text/plain', ''))):
                continue   # a tqdm progress bar: feedback while it ran, not a result
            elif WIDGET_MIME in data:
                o = AttrDict(output_type='display_data', metadata={}, data={'text/html':
                    '<div class="admonition info"><p class="admonition-title">Interactive widget</p><p>This output is an '
                    'ipywidgets app: it needs a running kernel. Open the notebook in Jupyter to use it.</p></div>'})
            outs.append(o)
        cell.outputs = outs


def note_cell(title:str, text:str):
    "A markdown cell holding a material admonition (the HTML that material's CSS styles; nbconvert passes it through)."
    from fastcore.nbio import mk_cell
    text = re.sub(r'`([^`]+)`', r'<code>\1</code>', text)   # markdown is not read inside an HTML block
    return mk_cell(f'<div class="admonition note"><p class="admonition-title">{title}</p><p>{text}</p></div>', 'markdown')


def render(path:Path, executed=None, js:str='assets/javascripts/plotly.min.js', why_not:str|None=None) -> dict:
    "Notebook `path` as its page shows it (a notebook dict): `executed` (its executed nbformat node) or its code alone."
    from fastcore.nbio import read_nb, dict2nb, nb2dict
    from nbdev.process import NBProcessor
    from nbdev.processors import (populate_language, add_show_docs, strip_ansi, hide_line, rm_header_dash, rm_export,
                                  clean_magics, hide_, strip_hidden_metadata)
    nb = dict2nb(json.loads(json.dumps(executed))) if executed is not None else read_nb(path)
    procs = [populate_language, add_show_docs, strip_ansi, hide_line, rm_header_dash, render_show_docs, hide_tests,
             quarto_directives, rm_export, clean_magics, hide_, type('static_outputs', (static_outputs,), {'js': js}),
             strip_hidden_metadata]
    NBProcessor(nb=nb, procs=procs, rm_directives=True).process()
    cells = nb.cells
    at = 1 if cells and cells[0].cell_type == 'markdown' else 0   # after the title
    stopped = executed is not None and executed.metadata.get('docs_stopped')
    if why_not:
        cells.insert(at, note_cell('Not executed for this site', f"This page shows the notebook's code without its outputs: "
                                   f"{why_not}. Run the notebook in Jupyter to see them."))
    elif stopped:
        cells.insert(at, note_cell('Partly executed', f"The docs build {stopped}: later cells show no output."))
    d = nb2dict(nb)
    for k in ('docs_execution', 'docs_stopped', 'docs_execution_failure', 'widgets'): d['metadata'].pop(k, None)
    for c in d['cells']:
        for k in [k for k in c if k.endswith('_') or k == 'has_sd']: c.pop(k)
    return d


# ---------------------------------------------------------------------------------------------------------------------

def _notebooks(only:set|None=None) -> list:
    "The notebooks with a page: every one in nbs/, or the index and the stems in `only`."
    return [nb for nb in sorted((ROOT / 'nbs').glob('*.ipynb'))
            if not nb.name.startswith('_') and (only is None or nb.stem in only or nb.name == 'index.ipynb')]


def stage(out:Path=STAGE, execute_only:set|None=None, use_cache:bool=True, notebooks:set|None=None) -> list:
    """Write the site's sources into `out`: index and notebooks (rendered, executed unless in NOT_EXECUTED or outside
    `execute_only`), the API pages and the assets; their paths."""
    if out.exists(): shutil.rmtree(out)
    (out / 'notebooks').mkdir(parents=True); (out / 'api').mkdir()
    shutil.copytree(ASSETS, out / 'assets')
    import plotly
    (out / 'assets' / 'javascripts').mkdir(parents=True, exist_ok=True)
    shutil.copy(Path(plotly.__file__).parent / 'package_data' / 'plotly.min.js', out / 'assets' / 'javascripts' / 'plotly.min.js')
    sys.path.insert(0, str(ROOT))
    (CACHE / 'kernels.log').unlink(missing_ok=True)
    written, pkg_hash, t0 = [], _source_hash(), time.time()
    for nb in _notebooks(notebooks):
        dest = out / 'index.ipynb' if nb.name == 'index.ipynb' else out / 'notebooks' / nb.name
        why_not = NOT_EXECUTED.get(nb.stem)
        if why_not is None and execute_only is not None and nb.stem not in execute_only:
            why_not = 'this build executed only ' + (', '.join(sorted(execute_only)) or 'no notebook') + ' (`--execute`)'
        executed, t = None, time.time()
        if why_not is None:
            executed, summary = execute(nb, use_cache, pkg_hash)
            print(f"  {nb.name}: {summary}", file=sys.stderr)
        js = os.path.relpath(out / 'assets' / 'javascripts' / 'plotly.min.js', dest.parent).replace(os.sep, '/')
        dest.write_text(json.dumps(render(nb, executed, js, why_not), indent=1, ensure_ascii=False))
        written.append(dest)
    print(f"  notebooks staged in {time.time() - t0:.0f} s", file=sys.stderr)
    import chimera_nb
    for m in sorted(pkgutil.iter_modules(chimera_nb.__path__), key=lambda m: m.name):
        if m.name.startswith('_'): continue
        page = api_page(f"chimera_nb.{m.name}")
        if page: (out / 'api' / f"{m.name}.md").write_text(page); written.append(out / 'api' / f"{m.name}.md")
    return written


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--site', default=str(ROOT / '_site'), help='where the site goes')
    ap.add_argument('--stage', default=str(STAGE), help="where the site's sources are written first")
    ap.add_argument('--execute', nargs='+', metavar='NOTEBOOK',
                    help="execute only these notebooks (stems, e.g. 02_viz), or 'none'; default: all but NOT_EXECUTED")
    ap.add_argument('--no-cache', action='store_true', help='execute again even when build/docs-cache has the result')
    ap.add_argument('--notebooks', nargs='+', metavar='NOTEBOOK', help="pages for these notebooks only (and the index); default: all")
    a = ap.parse_args(argv)
    only = None if a.execute is None else {s.removesuffix('.ipynb') for s in a.execute if s != 'none'}
    pages_of = None if a.notebooks is None else {s.removesuffix('.ipynb') for s in a.notebooks}
    for names in (only, pages_of):
        if unknown := (names or set()) - {p.stem for p in _notebooks()}: ap.error(f"no such notebook in nbs/: {', '.join(sorted(unknown))}")
    out = Path(a.stage).resolve()
    pages = stage(out, execute_only=only, use_cache=not a.no_cache, notebooks=pages_of)
    from mkdocs.config import load_config
    from mkdocs.commands.build import build
    rel = lambda p: str(p.relative_to(out))
    nav = [{'Home': 'index.ipynb'}, {'Notebooks': [rel(p) for p in pages if p.parent.name == 'notebooks']},
           {'API': [{p.stem: rel(p)} for p in pages if p.parent.name == 'api']}]
    cfg = load_config(str(ROOT / 'mkdocs.yml'), docs_dir=str(out), site_dir=a.site, nav=nav)
    t = time.time()
    build(cfg)
    for nb in _notebooks():   # beside each page its notebook (mkdocs-jupyter's include_source), as nbs/ has it, not as rendered
        dest = Path(a.site) / ('index.ipynb' if nb.name == 'index.ipynb' else f'notebooks/{nb.name}')
        if dest.exists(): shutil.copy(nb, dest)
    print(f"  mkdocs built the site in {time.time() - t:.0f} s", file=sys.stderr)
    print(f"{len(pages)} pages -> {a.site}/index.html")


if __name__ == '__main__': main()
