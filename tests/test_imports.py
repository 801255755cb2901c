"""The import graph of the repository: no cycles anywhere (keras_vit, tests, benchmarks),
`weights` never imports `applications`, tests import only `tests.support` of the tests, and
no benchmark imports the tests.

Every `import` statement of every module counts, at module level or inside a function (a
deferred import still ties the two modules together). `from package import name` is an
edge to `package.name` when that is a module, else to `package` itself. The benchmark scripts
import one another by bare name (`import throughput`), so they are named so here, and
`benchmarks.numpy_vit` is the same module as `numpy_vit`.
"""

import ast
import os
import pathlib

import pytest

import keras_vit

pytestmark = pytest.mark.backend_independent  # source files read as text: runs under one backend (tests/conftest.py)

ROOT = pathlib.Path(keras_vit.__file__).parent
REPO = ROOT.parent
# (folder, module-name prefix) of each part of the repository.
PARTS = ((ROOT, ["keras_vit"]), (REPO / "tests", ["tests"]), (REPO / "benchmarks", []))


def _modules():
    modules = {}
    for folder, prefix in PARTS:
        for path in folder.rglob("*.py"):
            parts = [*prefix, *path.relative_to(folder).with_suffix("").parts]
            if parts[-1] == "__init__":
                parts.pop()
            if parts:
                modules[".".join(parts)] = path
    return modules


def _resolve(target):
    return target.removeprefix("benchmarks.")


def _imports(name, path, modules):
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    targets = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets.update(_resolve(alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + [base] if base else anchor)
            for alias in node.names:
                full = _resolve(f"{base}.{alias.name}")
                targets.add(full if full in modules else _resolve(base))
    return {_resolve(t) for t in targets} & modules.keys() - {name}


def import_graph():
    modules = _modules()
    return {name: _imports(name, path, modules) for name, path in modules.items()}


def find_cycle(graph):
    """One import cycle as a list of modules (first repeated last), or None."""
    state, stack = {}, []

    def visit(node):
        state[node] = "open"
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == "open":
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        state[node] = "done"
        stack.pop()
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_cycle_finder_names_the_cycle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert find_cycle(graph) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_graph_sees_deferred_and_from_imports():
    graph = import_graph()
    assert "keras_vit.layers" in graph["keras_vit.model.architecture"]
    assert "keras_vit.weights.formats" in graph["keras_vit.weights.reading"]


def test_no_import_cycles():
    cycle = find_cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


# The package's floors, bottom first, by top-level module or sub-package of keras_vit: a module
# imports only from its own floor and those below (the package's `__init__`, which exports names
# lazily, stands above them all).
FLOORS = (
    ("utils", "preprocessing", "families"),
    ("variants",),
    ("config",),
    ("data",),
    ("layers",),
    ("model",),
    ("weights",),
    ("applications", "run_folder", "lora", "inspect", "text"),
    ("dense",),
    ("evaluation",),
    ("inference",),
    ("training",),
    ("cli",),
)


def test_few_modules_stand_at_the_top():
    top = sorted(path.name for path in ROOT.glob("*.py"))
    assert len(top) <= 8, f"{len(top)} modules at the top of keras_vit/ (at most 8, the entry points): {top}"


def floor_of(module):
    """The floor of a `keras_vit.` module (its top-level part's), None for the package itself."""
    part = module.split(".")[1] if module.count(".") else None
    found = [i for i, names in enumerate(FLOORS) if part in names]
    assert part is None or found, f"{module}: {part} is on no floor of FLOORS"
    return found[0] if found else None


def upward_imports(graph):
    return {
        (name, target)
        for name, targets in graph.items()
        if name.startswith("keras_vit.")
        for target in targets
        if target.startswith("keras_vit.") and floor_of(target) is not None and floor_of(name) is not None
        and floor_of(target) > floor_of(name)
    }


def test_no_module_imports_from_a_higher_floor():
    offenders = upward_imports(import_graph())
    assert not offenders, offenders


def test_upward_imports_are_found():
    graph = {"keras_vit.inference.predict": {"keras_vit.training.data"}, "keras_vit.training.x": {"keras_vit.layers"}}
    assert upward_imports(graph) == {("keras_vit.inference.predict", "keras_vit.training.data")}


def test_weights_do_not_import_applications():
    offenders = {
        (name, target)
        for name, targets in import_graph().items()
        if name.startswith("keras_vit.weights")
        for target in targets
        if target.startswith("keras_vit.applications")
    }
    assert not offenders, offenders


def test_tests_share_code_only_through_support():
    offenders = {
        (name, target)
        for name, targets in import_graph().items()
        for target in targets
        if target.startswith("tests") and not target.startswith("tests.support")
    }
    assert not offenders, offenders


def test_benchmarks_do_not_import_tests():
    graph = import_graph()
    benchmarks = {name for name in graph if not name.startswith(("keras_vit", "tests"))}
    offenders = {(name, t) for name in benchmarks for t in graph[name] if t.startswith("tests")}
    assert benchmarks and not offenders, offenders


def private_names_used_across_modules():
    """`(file, line, name)` of every private name (`_x`) of a keras_vit module used by another:
    imported by name, or read as an attribute of an imported keras_vit module."""
    found = []
    for path in sorted((REPO / "keras_vit").rglob("*.py")):
        tree = ast.parse(path.read_text())
        modules = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("keras_vit"):
                modules.update(alias.asname or alias.name for alias in node.names)
                found += [(path.name, node.lineno, alias.name) for alias in node.names if _private(alias.name)]
            elif isinstance(node, ast.Import):
                modules.update(a.asname or a.name for a in node.names if a.name.startswith("keras_vit"))
        found += [(path.name, node.lineno, f"{node.value.id}.{node.attr}") for node in ast.walk(tree)
                  if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                  and node.value.id in modules and _private(node.attr)]
    return found


def _private(name):
    return name.startswith("_") and not name.startswith("__")


def test_no_private_name_is_used_outside_its_module():
    assert not private_names_used_across_modules()


@pytest.mark.parametrize("backend", ["jax", "torch"])
def test_importing_the_library_leaves_tensorflow_unimported(backend):
    """`import keras_vit` on JAX or PyTorch: no TensorFlow (seconds of start-up and its log lines)
    until a data pipeline needs it."""
    import subprocess
    import sys

    code = "import sys, keras_vit; print(sorted(m for m in ('tensorflow', 'keras_vit.model') if m in sys.modules))"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "KERAS_BACKEND": backend})
    assert proc.returncode == 0 and proc.stdout.split("\n")[0] == "['keras_vit.model']", proc.stdout + proc.stderr[-2000:]
