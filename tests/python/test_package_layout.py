"""The Python package's layout rules (docs/architecture.md, "The Python package"): modules import
each other without circles, and none imports a private name (``_x``) from another module.

Read from the source with ``ast``, so every import counts, the ones inside functions too: a
circle through a function-level import still ties two modules into one."""

from __future__ import annotations

import ast
import pathlib

import pytest

PACKAGE = pathlib.Path(__file__).resolve().parents[2] / "python" / "stoker"


def _modules() -> dict[str, pathlib.Path | None]:
    modules: dict[str, pathlib.Path | None] = {"stoker._core": None}  # the native module
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        modules[".".join(parts)] = path
    return modules


MODULES = _modules()


def _owner(name: str) -> str:
    """The module that defines ``name`` (a module, or an attribute of one)."""
    while name not in MODULES:
        name = name.rpartition(".")[0]
    return name


def _imports(module: str, path: pathlib.Path):
    """(imported module, name or None) for each stoker import in ``path``."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "stoker":
                    yield _owner(alias.name), None
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(up + ([base] if base else []))
            if base.split(".")[0] != "stoker":
                continue
            for alias in node.names:
                if f"{base}.{alias.name}" in MODULES:  # `from stoker.x import submodule`
                    yield f"{base}.{alias.name}", None
                else:
                    yield _owner(base), alias.name


def _graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {m: set() for m in MODULES}
    for module, path in MODULES.items():
        if path is not None:
            graph[module] = {m for m, _ in _imports(module, path) if m != module}
    return graph


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    order: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles = []

    def visit(v: str) -> None:
        order[v] = low[v] = len(order)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in order:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], order[w])
        if low[v] == order[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for v in sorted(graph):
        if v not in order:
            visit(v)
    return circles


def test_no_module_imports_itself_back_through_others():
    graph = _graph()
    circles = _circles(graph)
    described = [
        ", ".join(f"{a} -> {b}" for a in c for b in sorted(graph[a] & set(c))) for c in circles
    ]
    assert not circles, "import circles:\n" + "\n".join(described)


def test_no_private_name_is_imported_from_another_module():
    found = [
        f"{module} imports {name} from {imported}"
        for module, path in MODULES.items()
        if path is not None
        for imported, name in _imports(module, path)
        if name and name.startswith("_") and not name.startswith("__") and name != "_core"
    ]
    assert not found, "\n".join(found)


@pytest.mark.parametrize(
    "package",
    ["datasets", "datasets.lerobot", "io", "writers", "integrations", "doctor", "checks.lerobot"],
)
def test_each_concept_folder_says_what_it_holds(package):
    path = PACKAGE.joinpath(*package.split("."), "__init__.py")
    docstring = ast.get_docstring(ast.parse(path.read_text()))
    assert docstring, f"stoker.{package} has no docstring"
    for module in sorted(p.stem for p in path.parent.iterdir() if p.suffix == ".py" or p.is_dir()):
        if module not in ("__init__", "__pycache__"):
            assert module in docstring, f"stoker.{package}'s docstring does not name {module}"


def test_the_checks_see_a_circle_and_a_private_import(tmp_path, monkeypatch):
    """The two rules above on a made-up package: a circle and a private import are found."""
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _circles(graph) == [["a", "b", "c"]]
    module = tmp_path / "stoker" / "m.py"
    module.parent.mkdir()
    module.write_text("from stoker.sampling import _hidden\n")
    monkeypatch.setitem(MODULES, "stoker.m", module)
    assert ("stoker.sampling", "_hidden") in list(_imports("stoker.m", module))


def test_the_projects_venv_has_the_stoker_command_the_demo_prints(tmp_path):
    """Issue 24: after `make demo`, `source .venv/bin/activate && stoker doctor --help` said
    "command not found". `make build` installs the project into its .venv, editable."""
    import os
    import subprocess
    import sys

    venv = os.path.join(os.path.dirname(__file__), "..", "..", ".venv")
    if os.path.realpath(sys.prefix) != os.path.realpath(venv):
        pytest.skip("run by the project's .venv (make test) only")
    command = os.path.join(venv, "bin", "stoker")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run([command, "doctor", "--help"], cwd=tmp_path, env=env,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: stoker doctor")
    # And `import stoker` from any folder, without PYTHONPATH.
    imported = subprocess.run([sys.executable, "-c", "import stoker; print(stoker.__file__)"],
                              cwd=tmp_path, env=env, capture_output=True, text=True)
    assert imported.returncode == 0, imported.stderr
    assert imported.stdout.startswith(os.path.realpath(os.path.join(venv, "..", "python")))
