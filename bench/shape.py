"""The code's shape against issue 23's targets, as a table: module sizes, exported notebook cells (mean size, cells
over 40 lines, share followed by a test or example), mode conditionals in the executor, StepState's fields; then one
row per notebook. Exit status 1 when a target is missed.

Run from anywhere: .venv/bin/python bench/shape.py [--root PATH] [--quiet]   (--quiet: the targets only, no notebook rows)

It reads files only (notebooks as JSON, modules as text and syntax trees), so it needs neither torch nor the package
importable, and takes well under a second.
"""
import argparse, ast, json, re, sys
from pathlib import Path

MODULE_MAX, RUNTIME_MAX = 800, 700        # lines per module; the executor's own budget
CELL_MEAN, CELL_MAX, TESTED_MIN = 12, 40, 0.65
MODE_FLAGS_MAX, STEP_FIELDS_MAX = 12, 15
# an `if` that branches on a run mode (evaluation, emulation, device, tracing, recomputation, forward-only)
MODE_FLAG = re.compile(r'\bif\b[^\n]*\b(evaluating|emulat\w*|cuda|is_cuda|tracing|trace|recompute\w*|forward_only)\b')
EXPORT, EXPORT_OR_HIDE = re.compile(r'\s*#\|\s*export'), re.compile(r'\s*#\|\s*(export|hide)')


def code_lines(src:str) -> int:
    "Lines of a cell that are code or comments: blank lines and `#|` directives do not count."
    return sum(1 for l in src.splitlines() if l.strip() and not l.lstrip().startswith('#|'))


def notebook_cells(path:Path) -> list:
    "(lines, tested) for each exported cell of a notebook: tested when the next code cell is neither exported nor hidden."
    cells = [''.join(c['source']) for c in json.loads(path.read_text())['cells'] if c['cell_type'] == 'code']
    out = []
    for i, src in enumerate(cells):
        if not EXPORT.match(src): continue
        nxt = cells[i + 1] if i + 1 < len(cells) else ''
        out.append((code_lines(src), bool(nxt.strip()) and not EXPORT_OR_HIDE.match(nxt)))
    return out


def step_state(runtime:Path):
    "(number of fields, fields that point back at the runtime) of the dataclass StepState in runtime.py, or None."
    if not runtime.exists(): return None
    for node in ast.walk(ast.parse(runtime.read_text())):
        if isinstance(node, ast.ClassDef) and node.name == 'StepState':
            fields = [s for s in node.body if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)
                      and 'ClassVar' not in ast.unparse(s.annotation)]
            back = [s.target.id for s in fields if 'Runtime' in ast.unparse(s.annotation) or s.target.id in ('runtime', 'rt', 'owner')]
            return len(fields), back
    return None


def measure(root:Path) -> dict:
    "Every number the targets are checked on."
    mods = {p.name: len(p.read_text().splitlines()) for p in sorted((root / 'chimera_nb').glob('*.py')) if p.name != '_modidx.py'}
    nbs = {p.stem: notebook_cells(p) for p in sorted((root / 'nbs').glob('*.ipynb'))}
    cells = [c for cs in nbs.values() for c in cs]
    runtime = root / 'chimera_nb' / 'runtime.py'
    return dict(mods=mods, nbs=nbs, cells=cells, step=step_state(runtime),
                flags=len(MODE_FLAG.findall(runtime.read_text())) if runtime.exists() else 0)


def summary(cells:list) -> tuple:
    "(count, mean lines, cells over CELL_MAX, share tested) of (lines, tested) pairs."
    n = len(cells)
    return (n, sum(l for l, _ in cells) / max(n, 1), sum(l > CELL_MAX for l, _ in cells), sum(t for _, t in cells) / max(n, 1))


def targets(m:dict) -> list:
    "(what, measured, goal, met) for each target."
    mods = m['mods']
    big = max(mods, key=mods.get) if mods else '-'
    over = [f"{k} {v}" for k, v in mods.items() if v > MODULE_MAX]
    n, mean, n_over, tested = summary(m['cells'])
    rows = [(f"largest module ({big})", mods.get(big, 0), f"<= {MODULE_MAX}", mods.get(big, 0) <= MODULE_MAX),
            ("modules over the limit", ', '.join(over) or 'none', 'none', not over),
            ("runtime.py lines", mods.get('runtime.py', 0), f"<= {RUNTIME_MAX}", mods.get('runtime.py', 0) <= RUNTIME_MAX),
            (f"exported cells ({n}): mean lines", round(mean, 1), f"<= {CELL_MEAN}", mean <= CELL_MEAN),
            (f"exported cells over {CELL_MAX} lines", n_over, '0', n_over == 0),
            ("exported cells followed by a test", f"{tested:.0%}", f">= {TESTED_MIN:.0%}", tested >= TESTED_MIN),
            ("mode conditionals in runtime.py", m['flags'], f"<= {MODE_FLAGS_MAX}", m['flags'] <= MODE_FLAGS_MAX)]
    if m['step'] is not None:
        k, back = m['step']
        rows += [("StepState fields", k, f"<= {STEP_FIELDS_MAX}", k <= STEP_FIELDS_MAX),
                 ("StepState back-pointers", ', '.join(back) or 'none', 'none', not back)]
    return rows


def table(header:list, rows:list) -> str:
    "A markdown table, columns padded to their widest cell."
    rows = [[str(c) for c in r] for r in [header] + rows]
    w = [max(len(r[i]) for r in rows) for i in range(len(header))]
    line = lambda r: '| ' + ' | '.join(c.ljust(w[i]) for i, c in enumerate(r)) + ' |'
    return '\n'.join([line(rows[0]), '|' + '|'.join('-' * (x + 2) for x in w) + '|'] + [line(r) for r in rows[1:]])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    ap.add_argument('--root', type=Path, default=Path(__file__).resolve().parent.parent, help='the project folder')
    ap.add_argument('--quiet', action='store_true', help='the targets only, no row per notebook')
    a = ap.parse_args(argv)
    m = measure(a.root)
    rows = targets(m)
    print(table(['target', 'measured', 'goal', 'met'], [(w, v, g, 'yes' if ok else 'NO') for w, v, g, ok in rows]))
    if not a.quiet:
        per = [(nb, *summary(cs)) for nb, cs in m['nbs'].items() if cs]
        print()
        print(table(['notebook', 'exported cells', 'mean lines', f'over {CELL_MAX}', 'tested'],
                    [(nb, n, f"{mean:.1f}", over, f"{t:.0%}") for nb, n, mean, over, t in per]))
    missed = [w for w, _, _, ok in rows if not ok]
    print(f"\n{len(rows) - len(missed)} of {len(rows)} targets met" + (f"; missed: {'; '.join(missed)}" if missed else ''))
    return 1 if missed else 0


if __name__ == '__main__': sys.exit(main())
