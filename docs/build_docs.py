"""Build the static documentation site: the notebooks as pages (not executed) and one API page per module.

    python docs/build_docs.py            # writes build/docs/ (the pages) and _site/ (the site)

Quarto, which nbdev's own renderer needs, cannot be installed offline, so the site is built by mkdocs-material and
mkdocs-jupyter with execution off (the notebooks are saved without outputs; running them all takes minutes). The API
pages come from the code: every name in each module's `__all__`, with its signature, docstring and the parameter
comments that fastcore's `docments` reads (the same comments nbdev's `show_doc` renders)."""
import argparse, importlib, inspect, pkgutil, shutil, sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
STAGE = ROOT / 'build' / 'docs'


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


def stage(out:Path=STAGE) -> list:
    "Write the site's sources into `out`: index and notebooks (copied as they are), and the API pages; their paths."
    if out.exists(): shutil.rmtree(out)
    (out / 'notebooks').mkdir(parents=True); (out / 'api').mkdir()
    written = []
    for nb in sorted((ROOT / 'nbs').glob('*.ipynb')):
        if nb.name.startswith('_'): continue
        dest = out / 'index.ipynb' if nb.name == 'index.ipynb' else out / 'notebooks' / nb.name
        shutil.copy(nb, dest); written.append(dest)
    sys.path.insert(0, str(ROOT))
    import chimera_nb
    for m in sorted(pkgutil.iter_modules(chimera_nb.__path__), key=lambda m: m.name):
        if m.name.startswith('_'): continue
        page = api_page(f"chimera_nb.{m.name}")
        if page: (out / 'api' / f"{m.name}.md").write_text(page); written.append(out / 'api' / f"{m.name}.md")
    return written


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--site', default=str(ROOT / '_site'), help='where the site goes')
    a = ap.parse_args(argv)
    pages = stage()
    from mkdocs.config import load_config
    from mkdocs.commands.build import build
    rel = lambda p: str(p.relative_to(STAGE))
    nav = [{'Home': 'index.ipynb'}, {'Notebooks': [rel(p) for p in pages if p.parent.name == 'notebooks']},
           {'API': [{p.stem: rel(p)} for p in pages if p.parent.name == 'api']}]
    cfg = load_config(str(ROOT / 'mkdocs.yml'), site_dir=a.site, nav=nav)
    build(cfg)
    print(f"{len(pages)} pages -> {a.site}/index.html")


if __name__ == '__main__': main()
