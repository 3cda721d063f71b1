"""The package's imports run one way: read from its source with ast (imports inside functions, methods and `if` blocks
included), the modules form no circle, no module imports another's private name, and the public surface stays small.
`python tests/test_layers.py` prints the floors (each module above everything it imports) with their sizes."""
import ast, collections, graphlib
from pathlib import Path

PKG = Path(__file__).resolve().parent.parent / 'chimera_nb'
MAX_PUBLIC = 400   # names in __all__ over the package


def modules() -> list:
    return sorted(p.stem for p in PKG.glob('*.py') if p.name not in ('__init__.py', '_modidx.py'))


def import_graph() -> tuple:
    "({module: {modules it imports}}, [(module, imported module, private name)], public names in __all__)."
    mods, edges, private, public = set(modules()), collections.defaultdict(set), [], 0
    for m in sorted(mods):
        for node in ast.walk(ast.parse((PKG / f'{m}.py').read_text())):
            if isinstance(node, ast.ImportFrom) and (node.level or (node.module or '').startswith('chimera_nb')):
                mod = (node.module or '').removeprefix('chimera_nb').lstrip('.').split('.')[0]
                targets = [mod] if mod else [a.name for a in node.names]   # `from . import x` imports module x
                for t in targets:
                    if t in mods and t != m:
                        edges[m].add(t)
                        private += [(m, t, a.name) for a in node.names if mod and a.name.startswith('_') and not a.name.startswith('__')]
            elif isinstance(node, ast.Import):
                for a in node.names:
                    t = a.name.split('.')[1] if a.name.startswith('chimera_nb.') else None
                    if t in mods and t != m: edges[m].add(t)
            elif isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == '__all__' for t in node.targets):
                public += len(ast.literal_eval(node.value))
    return {m: edges[m] for m in sorted(mods)}, private, public


def floors(edges:dict) -> dict:
    "{module: floor}: 0 for a module that imports none of the package, else one above the highest it imports."
    out = {}
    for m in graphlib.TopologicalSorter(edges).static_order():   # dependencies first; raises CycleError on a circle
        out[m] = 1 + max((out[d] for d in edges.get(m, ())), default=-1)
    return out


def test_no_import_circle():
    edges, _, _ = import_graph()
    try: floors(edges)
    except graphlib.CycleError as e: raise AssertionError(f"import circle: {' -> '.join(e.args[1])}") from e


def test_no_private_name_crosses_a_module():
    _, private, _ = import_graph()
    assert not private, [f"{a} imports {b}.{n}" for a, b, n in private]


def test_public_surface_is_small():
    _, _, public = import_graph()
    assert public <= MAX_PUBLIC, f"{public} names in __all__ over the package (at most {MAX_PUBLIC}): make helpers private"


GROUND = {'checks', 'hardware', 'catalog', 'files', 'store', 'payload', '_compat'}   # shared pieces: validation, presets, files

def test_the_ground_floor_stands_on_itself():
    "The shared pieces every module may use import only each other: no low module needs the spec to check a number."
    edges, _, _ = import_graph()
    for m in GROUND: assert edges[m] <= GROUND, (m, edges[m] - GROUND)
    for m in ('comm', 'data', 'launch', 'search', 'simulate', 'runtime', 'program', 'ir', 'schedules'):
        assert 'spec' not in edges[m] and 'perf_model' not in edges[m], (m, edges[m])


def test_entry_points_are_on_top():
    "The command lines (chimera-nb, chimera-train, chimera-slurm) live in cli, which nothing imports."
    edges, _, _ = import_graph()
    assert not [m for m, ts in edges.items() if 'cli' in ts]


UI = {'explore', 'job_widgets', 'playground'}   # the app layer: every widget (plots, in viz, are not widgets)

def test_the_launcher_has_no_ui():
    "Widgets live in the app layer: nothing below it imports ipywidgets or anywidget, and the launcher reaches no UI module."
    edges, _, _ = import_graph()
    widget_users = {m for m in edges if any(isinstance(n, (ast.Import, ast.ImportFrom)) and any(
        (a.name if isinstance(n, ast.Import) else n.module or '').split('.')[0] in ('ipywidgets', 'anywidget') for a in n.names)
        for n in ast.walk(ast.parse((PKG / f'{m}.py').read_text())))}
    assert widget_users <= UI, widget_users - UI
    for m in ('slurm', 'calibrate', 'sweep', 'slurm_scripts', 'train', 'report'):
        seen, todo = set(), [m]
        while todo: todo += [t for t in edges[todo.pop()] if t not in seen and not seen.add(t)]
        assert not seen & UI, (m, seen & UI)


if __name__ == '__main__':
    edges, private, public = import_graph()
    by_floor = collections.defaultdict(list)
    for m, f in floors(edges).items(): by_floor[f].append(m)
    for f in sorted(by_floor):
        print(f"floor {f}: " + ', '.join(f"{m} ({sum(1 for _ in open(PKG / f'{m}.py'))})" for m in sorted(by_floor[f])))
    print(f"{len(edges)} modules, {sum(map(len, edges.values()))} import arrows, {len(private)} private cross-module imports, {public} public names")
