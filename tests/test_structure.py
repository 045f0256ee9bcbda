"""The package's shape, kept honest: no import cycles, no private name used outside its module, every ``__all__``
true, and every error raised on purpose an ``RxGraphError``."""

from __future__ import annotations

import ast
import builtins
import importlib
import inspect
from collections.abc import Iterator
from pathlib import Path

import pytest

import rxgraph
from rxgraph.errors import RxGraphError

PACKAGE = Path(rxgraph.__file__).resolve().parent
MODULES = {
    ".".join(("rxgraph", *path.relative_to(PACKAGE).with_suffix("").parts)).removesuffix(".__init__"): path
    for path in sorted(PACKAGE.rglob("*.py"))
}
IMPORTABLE = sorted(m for m in MODULES if not m.endswith("__main__"))  # importing __main__ runs the command line

# Private names of other code that rxgraph relies on, each pinned by a test and worth its price.
FOREIGN_PRIVATE_NAMES = {
    ("rxgraph.rx._subscribe", "_subscribe_core"): "reactivex's subscribe hook (tests/rx/test_reactivex_contract.py)",
    ("rxgraph.rx._awaitable", "_loop"): "the loop of reactivex's AsyncIO schedulers (test_reactivex_contract.py)",
    ("rxgraph.graph._transition", "_replace"): "a NamedTuple's documented copy-with-changes method (Position)",
    ("rxgraph.tools.langchain", "_arun"): "how LangChain's own arun tells a tool's async code from its default's "
    "(tests/agent/test_langchain_tools.py: a BaseTool subclass's own _arun is awaited)",
}
# A module may use another module's private names only where that module says so, and why.
FRIENDS = {
    ("rxgraph.graph._run", "_node"): "StreamingOutput's fields: built without calling the class, per chunk",
    ("rxgraph.graph._run", "_state"): "StreamingOutput's fields: built without calling the class, per chunk",
    ("rxgraph.graph._run", "_chunk"): "StreamingOutput's fields: built without calling the class, per chunk",
}

# Errors whose type a protocol prescribes: they are not rxgraph's to choose.
PROTOCOL_ERRORS = {
    "IndexError": "Sequence.__getitem__ (iteration stops on it)",
    "SystemExit": "the command line's exit status",
    "NotImplementedError": "abstract methods",
    "AttributeError": "a module's __getattr__ (PEP 562) for a name it does not have",
}


def _tree(module: str) -> ast.Module:
    return ast.parse(MODULES[module].read_text(encoding="utf-8"), filename=str(MODULES[module]))


def _imports(module: str) -> Iterator[str]:
    """Every rxgraph module ``module`` imports, anywhere in it (TYPE_CHECKING blocks and functions included)."""
    package = module if MODULES[module].name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(_tree(module)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                origin = ".".join(base + ([node.module] if node.module else []))
            else:
                origin = node.module or ""
            names = [origin] + [f"{origin}.{alias.name}" for alias in node.names]
        else:
            continue
        for name in names:
            if name in MODULES and name != module:
                yield name


def test_no_module_of_the_package_imports_itself_back() -> None:
    graph = {module: set(_imports(module)) for module in MODULES}
    # A package's __init__ importing its own modules is how packages are built, not a cycle of logic.
    for module, targets in graph.items():
        if MODULES[module].name == "__init__.py":
            graph[module] = {t for t in targets if not t.startswith(module + ".")}
    cycles: list[list[str]] = []

    def visit(module: str, path: list[str], on_path: set[str], done: set[str]) -> None:
        for target in sorted(graph[module]):
            if target in on_path:
                cycles.append([*path[path.index(target) :], target])
            elif target not in done:
                on_path.add(target)
                visit(target, [*path, target], on_path, done)
                on_path.discard(target)
        done.add(module)

    done: set[str] = set()
    for module in sorted(graph):
        if module not in done:
            visit(module, [module], {module}, done)
    assert not cycles, "import cycles:\n" + "\n".join(" -> ".join(cycle) for cycle in cycles)


def _defined_names(tree: ast.Module) -> set[str]:
    """Every name a module defines: functions, classes, assignments, attributes it sets, slots it declares."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            names.add(node.attr)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
        elif isinstance(node, ast.alias) and node.asname:
            names.add(node.asname)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.isidentifier():
            names.add(node.value)  # __slots__ entries, dict keys passed to update(...)
    return names


def _is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def test_no_private_name_is_used_outside_the_module_that_defines_it() -> None:
    found: list[str] = []
    for module in MODULES:
        tree = _tree(module)
        own = _defined_names(tree)
        for node in ast.walk(tree):
            used: str | None = None
            if isinstance(node, ast.Attribute) and _is_private(node.attr) and node.attr not in own:
                used = node.attr
            elif isinstance(node, ast.ImportFrom):
                for alias in node.names:
                    if _is_private(alias.name):
                        used = alias.name
            if used is None or (module, used) in FOREIGN_PRIVATE_NAMES or (module, used) in FRIENDS:
                continue
            found.append(f"{module}:{node.lineno}: {used}")
    # Friends are only allowed to reach into what they name, and only the names listed.
    for (module, name), _why in FRIENDS.items():
        assert name in _defined_names(_tree("rxgraph.graph._outputs")), f"{name} is not StreamingOutput's any more"
        assert module in MODULES
    assert not found, "private names used outside their module:\n" + "\n".join(found)


PUBLIC_MODULES = [
    m for m, path in MODULES.items() if path.name == "__init__.py" or not m.rpartition(".")[2].startswith("_")
]
"""The modules users import from: the packages, and the modules without a leading underscore."""


@pytest.mark.parametrize("module_name", IMPORTABLE)
def test_every_all_is_true(module_name: str) -> None:
    """Every ``__all__`` lists names the module has, once each; a package's lists every public name it has (it only
    re-exports), and a module's lists every public class and function it defines."""
    module = importlib.import_module(module_name)
    listed = getattr(module, "__all__", None)
    if listed is None:
        assert module_name.startswith("rxgraph.examples"), f"{module_name} has no __all__"  # scripts to read and run
        return
    assert len(listed) == len(set(listed)), f"{module_name}.__all__ lists a name twice"
    for name in listed:
        assert hasattr(module, name), f"{module_name}.__all__ lists {name!r}, which it does not have"
    if MODULES[module_name].name == "__init__.py":
        public = {n for n, v in vars(module).items() if not n.startswith("_") and not inspect.ismodule(v)}
    else:
        public = {
            n
            for n, v in vars(module).items()
            if not n.startswith("_") and (inspect.isclass(v) or inspect.isfunction(v)) and v.__module__ == module_name
        }
    assert public <= set(listed), f"{module_name}: public names missing from __all__: {sorted(public - set(listed))}"


def _origin(module: str, node: ast.ImportFrom) -> str:
    """The module a ``from ... import`` statement of ``module`` imports from, relative imports resolved."""
    if not node.level:
        return node.module or ""
    package = module if MODULES[module].name == "__init__.py" else module.rpartition(".")[0]
    base = package.split(".")
    return ".".join([*base[: len(base) - node.level + 1], *([node.module] if node.module else [])])


def _binding(module: str, name: str) -> ast.stmt | None:
    """The top-level statement of ``module`` that binds ``name``: a definition, an assignment or an import."""
    for node in _tree(module).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            bound = [node.name]
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            bound = [target.id for target in targets if isinstance(target, ast.Name)]
        elif isinstance(node, ast.ImportFrom):
            bound = [alias.asname or alias.name for alias in node.names]
        else:
            continue
        if name in bound:
            return node
    return None


def _home(module: str, name: str) -> str | None:
    """The module that defines ``name`` as ``module`` has it: its imports followed to the statement that is not an
    import (the import's origin, when that is not an rxgraph module; ``None`` when no top-level statement binds it)."""
    node = _binding(module, name)
    if not isinstance(node, ast.ImportFrom):
        return module if node is not None else None
    origin = _origin(module, node)
    imported = next(alias.name for alias in node.names if (alias.asname or alias.name) == name)
    return _home(origin, imported) if origin in MODULES else origin


def _subpackage(module: str) -> str:
    """The subpackage a module belongs to (``rxgraph.checkpoint`` for ``rxgraph.checkpoint.contract``); a module
    directly in ``rxgraph`` (``rxgraph.errors``) is its own."""
    return ".".join(module.split(".")[:2])


def test_public_names_are_defined_in_their_own_subpackage() -> None:
    """Every name in a public module's ``__all__`` is defined (its imports followed to the statement that defines
    it) in that public module's own subpackage, or in a private module directly in ``rxgraph`` (``rxgraph._frozen``:
    building blocks no subpackage owns). So no module re-exports what a private module of another subpackage
    defines: a name is public in the subpackage that makes it. The package ``rxgraph`` is the exception: each name
    of its ``__all__`` is imported from a public module that lists it in its own ``__all__``."""
    public = set(PUBLIC_MODULES)
    wrong: list[str] = []
    for module_name in sorted(public - {"rxgraph"}):
        for name in getattr(importlib.import_module(module_name), "__all__", ()):
            home = _home(module_name, name)
            shared = home is not None and home.count(".") == 1 and _is_private(home.rpartition(".")[2])
            if home is None or not (shared or _subpackage(home) == _subpackage(module_name)):
                wrong.append(f"{module_name}.{name} is defined in {home}, outside {_subpackage(module_name)}")
    for name in rxgraph.__all__:
        node = _binding("rxgraph", name)
        origin = _origin("rxgraph", node) if isinstance(node, ast.ImportFrom) else None
        if origin not in public or name not in getattr(importlib.import_module(origin), "__all__", ()):
            wrong.append(f"rxgraph.{name} is not imported from a public module that exports it (from {origin})")
    assert not wrong, "public names that are not public where they are made:\n" + "\n".join(wrong)


def test_every_error_is_exported_from_one_place() -> None:
    from rxgraph import errors

    homes: dict[str, list[str]] = {}
    for module_name in PUBLIC_MODULES:
        module = importlib.import_module(module_name)
        for name in getattr(module, "__all__", ()):
            value = getattr(module, name)
            if isinstance(value, type) and issubclass(value, BaseException):
                homes.setdefault(name, []).append(module_name)
    for name in errors.__all__:
        assert sorted(homes.get(name, [])) == ["rxgraph", "rxgraph.errors"], (
            f"{name} is exported from {homes.get(name)}"
        )


def _raised_names(module: str) -> Iterator[tuple[int, str]]:
    """The exception classes a module raises by name: ``raise Name(...)`` and ``raise Name``."""
    tree = _tree(module)
    validators = {
        id(node)
        for function in ast.walk(tree)
        if isinstance(function, ast.FunctionDef)
        and any(
            (isinstance(d, ast.Call) and getattr(d.func, "id", getattr(d.func, "attr", "")).endswith("validator"))
            or getattr(d, "id", getattr(d, "attr", "")).endswith("validator")
            for d in function.decorator_list
        )
        for node in ast.walk(function)
    }
    for node in ast.walk(tree):
        if not isinstance(node, ast.Raise) or node.exc is None or id(node) in validators:
            continue
        exc = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
        if isinstance(exc, ast.Name) and exc.id[:1].isupper():
            yield node.lineno, exc.id
        elif isinstance(exc, ast.Attribute) and exc.attr[:1].isupper():
            yield node.lineno, exc.attr


def test_every_error_raised_on_purpose_is_an_rxgraph_error() -> None:
    wrong: list[str] = []
    for module_name in IMPORTABLE:
        module = importlib.import_module(module_name)
        for line, name in _raised_names(module_name):
            if name in PROTOCOL_ERRORS:
                continue
            if name == "AssertionError" and module_name.startswith("rxgraph.testing."):
                continue  # how a testing tool fails the test that uses it
            error = getattr(module, name, None) or getattr(builtins, name, None)
            if not (isinstance(error, type) and issubclass(error, RxGraphError)):
                wrong.append(f"{module_name}:{line}: raise {name}")
    assert not wrong, "errors raised on purpose that are not RxGraphErrors:\n" + "\n".join(wrong)


def test_the_error_tree_in_the_docstring_matches_the_classes() -> None:
    from rxgraph import errors

    drawn = errors.__doc__ or ""
    for name in errors.__all__:
        error = getattr(errors, name)
        assert name in drawn, f"{name} is missing from the tree drawn in rxgraph/errors.py"
        assert issubclass(error, RxGraphError)
        for base in error.__bases__:
            if issubclass(base, RxGraphError) and base is not RxGraphError:
                # drawn below its parent: the parent's name appears before it
                assert drawn.index(base.__name__) < drawn.index(name), f"{name} is not drawn under {base.__name__}"


MAX_CLASS_LINES = 400


def test_no_class_is_over_the_size_limit() -> None:
    """A class from its ``class`` line to its last line, docstrings included: one that grows past this limit holds
    more than one idea and is split along its seams (as the run is: ``_run``, ``_steps``, ``_run_end``, ...)."""
    big = [
        f"{module}:{node.lineno}: class {node.name} has {node.end_lineno - node.lineno + 1} lines"
        for module in MODULES
        for node in ast.walk(_tree(module))
        if isinstance(node, ast.ClassDef) and node.end_lineno is not None
        if node.end_lineno - node.lineno + 1 > MAX_CLASS_LINES
    ]
    assert not big, f"classes over {MAX_CLASS_LINES} lines:\n" + "\n".join(big)
