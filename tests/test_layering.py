"""The import rules of ARCHITECTURE.md, read from the source (``ast``): which packages may import which, and
no import cycle between modules, at import time or through imports inside functions."""

from __future__ import annotations

import ast
import functools
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import ROOT

PACKAGES = ("edit_server", "engine", "evals")


def _module(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@functools.cache
def _imports(path: Path, functions: bool = True, type_checking: bool = True) -> frozenset[str]:
    """Modules ``path`` imports (``from a import b`` gives ``a`` and ``a.b``). ``functions=False``: only those
    run at import time (not inside a function); ``type_checking=False``: not those under
    ``if TYPE_CHECKING:`` (never run)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    pkg = _module(path) if path.name == "__init__.py" else _module(path).rpartition(".")[0]
    out: set[str] = set()

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if not functions and isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            if not type_checking and isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                continue
            if isinstance(child, ast.Import):
                out.update(a.name for a in child.names)
            elif isinstance(child, ast.ImportFrom):
                base = pkg.split(".")[: len(pkg.split(".")) - child.level + 1] if child.level else []
                mod = ".".join([*base, *([child.module] if child.module else [])])
                out.add(mod)
                out.update(f"{mod}.{a.name}" for a in child.names)
            visit(child)

    visit(tree)
    return frozenset(out)


SOURCES = {_module(p): p for pkg in PACKAGES for p in sorted((ROOT / pkg).rglob("*.py"))}


Rule = Callable[[str], bool]


def _rel(mod: str) -> str:
    return str(SOURCES[mod].relative_to(ROOT))


def _under(*prefixes: str) -> Rule:
    """A module (``a.b``) or file (``a/b.py``) name at or below one of ``prefixes``."""
    return lambda name: any(name == p or name.startswith((p + ".", p + "/")) for p in prefixes)


def _uses(allowed: Rule, banned: Rule) -> tuple[list[str], list[str]]:
    """(imports of ``banned`` modules from files ``allowed`` accepts, … from the other files)."""
    ok: list[str] = []
    bad: list[str] = []
    for m, path in SOURCES.items():
        for t in sorted(_imports(path)):
            if banned(t):
                (ok if allowed(_rel(m)) else bad).append(f"{_rel(m)} imports {t}")
    return ok, bad


@pytest.mark.parametrize(("rule", "allowed", "banned"), [
    ("only edit_server/lsp/ and the one client (evals/lsp_client.py) speak LSP",
     _under("edit_server/lsp", "evals/lsp_client.py"), _under("pygls", "lsprotocol", "pytest_lsp")),
    ("aiohttp: the HTTP app, the remote transport, the HTTP bench",
     lambda f: f in ("edit_server/http/app.py", "engine/remote/transport.py", "edit_server/cli/bench_http.py"),
     _under("aiohttp")),
    ("engine/ never imports edit_server/ or evals/", lambda f: not f.startswith("engine/"),
     _under("edit_server", "evals")),
    ("serving never imports engine/train/ (only the trainer and the offline `align` CLI on top do)",
     lambda f: f.startswith(("engine/train/", "edit_server/cli/align")), _under("engine.train")),
    ("serving never imports evals/ or the front ends on top (edit_server/cli/)",
     lambda f: f.startswith(("edit_server/cli/", "evals/")) or f == "edit_server/__main__.py",
     _under("evals", "edit_server.cli")),
    ("one LSP client: only evals/lsp_client.py drives pygls's LanguageClient",
     lambda f: f == "evals/lsp_client.py", _under("pygls.lsp.client")),
    ("evals/ drives the server as a client (its own evals/lsp_client.py, the one client): it imports no edit_server",
     lambda f: not f.startswith("evals/"), _under("edit_server")),
    ("the next edit's candidates (edit_server/nextedit/) sit above selection: the gate, the selection and the "
     "feedback store never import them", lambda f: not f.startswith("edit_server/selectivity/"),
     _under("edit_server.nextedit")),
    ("the location model is fitted offline: only edit_server/cli/ imports scikit-learn",
     lambda f: f.startswith("edit_server/cli/"), _under("sklearn")),
    ("edit_server/core/ is the vocabulary: it imports nothing of the orchestration (edit_server/serving/), the "
     "front ends (lsp/, http/) or the CLI", lambda f: not f.startswith("edit_server/core/"),
     _under("edit_server.serving", "edit_server.lsp", "edit_server.http", "edit_server.cli")),
    ("the stages the orchestration drives (context/, selectivity/, nextedit/) never import it (edit_server/serving/)",
     lambda f: not f.startswith(("edit_server/context/", "edit_server/selectivity/", "edit_server/nextedit/")),
     _under("edit_server.serving")),
    ("the orchestration (edit_server/serving/) never imports the front ends (lsp/, http/) or the CLI on top",
     lambda f: not f.startswith("edit_server/serving/"),
     _under("edit_server.lsp", "edit_server.http", "edit_server.cli")),
])
def test_import_rule(rule: str, allowed: Rule, banned: Rule) -> None:
    ok, bad = _uses(allowed, banned)
    assert bad == [], rule
    assert ok, f"{rule}: no allowed import seen either (the rule matches nothing)"


def _graph(functions: bool) -> dict[str, set[str]]:
    """Module -> the project modules it imports (a module importing its own package's ``__init__`` is not
    an edge; imports only for type checking never run and are not followed)."""
    return {m: {t for t in _imports(p, functions=functions, type_checking=False)
                if t in SOURCES and t != m and not m.startswith(t + ".")} for m, p in SOURCES.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    cycles: list[list[str]] = []
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def walk(m: str, path: list[str]) -> None:
        state[m] = 1
        for t in sorted(graph[m]):
            if state.get(t) == 1:
                cycles.append(path[path.index(t):] + [t])
            elif t not in state:
                walk(t, [*path, t])
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            walk(m, [m])
    return cycles


def test_cycle_finder_finds_cycles() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c", "a"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycle_at_import_time() -> None:
    """Module-level imports form no cycle (an import inside a function, or only for type checking, is
    not followed)."""
    graph = _graph(functions=False)
    assert "engine.api" in graph["edit_server.serving.pipeline"]  # the parser sees the imports
    assert _cycles(graph) == []


def test_no_import_cycle_through_functions() -> None:
    """Imports inside functions (lazy: start-up time, optional dependencies) form no cycle either: what two
    modules share lives in a third that imports neither (``edit_server/cli/bench_common.py``, ``http/common.py``,
    ``cli/align_common.py``). Imports only for type checking are not followed."""
    graph = _graph(functions=True)
    assert "edit_server.cli.bench_batch" in graph["edit_server.cli.bench_engine"]  # a function-level import is seen
    assert "edit_server.serving.pipeline" in _imports(SOURCES["edit_server.lsp.suggest"])  # TYPE_CHECKING: seen
    assert "edit_server.lsp.suggest" in graph["edit_server.lsp.server"]
    assert _cycles(graph) == []


def test_no_import_cycle_even_for_type_checking() -> None:
    """Not even the imports made only for type checking close a circle: a module that needs its caller's
    type names a Protocol of its own (``lsp/suggest.py``'s ``Host``) instead of importing the caller."""
    graph = {m: {t for t in _imports(p) if t in SOURCES and t != m and not m.startswith(t + ".")}
             for m, p in SOURCES.items()}
    assert _cycles(graph) == []


ENGINE_NAMES = ("eng", "engine", "runner", "j", "job", "jobs")


def _engine_typing_faults(tree: ast.AST) -> list[str]:
    """Parameters naming the engine or its jobs typed ``Any``, and calls into an engine's private members
    (``eng._step``): the decoding strategies see the engine through `engine.decoding.steps.StepRunner`."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            for a in [*node.args.args, *node.args.kwonlyargs]:
                if a.arg in ENGINE_NAMES and a.annotation is not None and "Any" in ast.unparse(a.annotation):
                    out.append(f"{node.name}({a.arg}: {ast.unparse(a.annotation)}) line {node.lineno}")
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and \
                node.value.id in ENGINE_NAMES and node.attr.startswith("_") and not node.attr.startswith("__"):
            out.append(f"{node.value.id}.{node.attr} line {node.lineno}")
    return out


def test_no_any_typed_engine_callbacks() -> None:
    assert _engine_typing_faults(ast.parse("def f(eng: Any, j: list[Any]) -> None:\n    eng._step()\n")) == [
        "f(eng: Any) line 1", "f(j: list[Any]) line 1", "eng._step line 2"]
    faults = {_rel(m): f for m, p in SOURCES.items() if m.startswith("engine.")
              and (f := _engine_typing_faults(ast.parse(p.read_text(encoding="utf-8"))))}
    assert faults == {}


# Layers, bottom to top; an import never points to a higher layer. engine/train/ is a side branch of the
# engine (offline): the serving layer must not use it (the rule above), the front ends on top may.
LAYERS: tuple[tuple[str, Rule], ...] = (
    ("engine", lambda m: m.startswith("engine") and not m.startswith("engine.train")),
    ("engine.train", _under("engine.train")),
    ("serving", lambda m: m.startswith("edit_server") and not _under("edit_server.cli", "edit_server.__main__")(m)),
    ("evals", _under("evals")),
    ("front ends (edit_server/cli/)", _under("edit_server.cli", "edit_server.__main__")),
)


def _layer(module: str) -> int:
    return next(i for i, (_, inside) in enumerate(LAYERS) if inside(module))


def test_no_import_runs_up_a_layer() -> None:
    """engine -> engine/train -> serving (edit_server/ below cli/: core, context, selectivity, nextedit, serving,
    lsp, http; their order among themselves: the rules above) -> evals (a client
    of the server: it imports nothing of serving, not even for its LSP client) -> the front ends on top (CLIs, benchmarks,
    demo, the offline align commands)."""
    assert _layer("edit_server.cli.align_kto") == 4 and _layer("evals.lsp_client") == 3
    up = [f"{_rel(m)} ({LAYERS[_layer(m)][0]}) imports {t} ({LAYERS[_layer(t)][0]})"
          for m, p in SOURCES.items() for t in sorted(_imports(p)) if t in SOURCES and _layer(t) > _layer(m)]
    assert up == []


def _simple_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every distinct simple cycle (no module twice), once each: rooted at its smallest module, the edges
    walked in order (``a -> b -> a`` is one circle, ``a -> b -> c -> a`` and ``a -> c -> b -> a`` are two)."""
    out: list[list[str]] = []

    def walk(start: str, m: str, path: list[str]) -> None:
        for t in sorted(graph.get(m, ())):
            if t == start:
                out.append([*path, start])
            elif t > start and t not in path:
                walk(start, t, [*path, t])

    for s in sorted(graph):
        walk(s, s, [s])
    return out


ENGINE_CIRCLES_MAX = 3


def test_simple_cycle_counter() -> None:
    assert _simple_cycles({"a": {"b"}, "b": {"a", "c"}, "c": {"a"}}) == [["a", "b", "a"], ["a", "b", "c", "a"]]
    assert _simple_cycles({"a": {"b", "c"}, "b": {"c"}, "c": {"a", "b"}}) == [
        ["a", "b", "c", "a"], ["a", "c", "a"], ["b", "c", "b"]]
    assert _simple_cycles({"a": {"b"}, "b": set()}) == []


def test_engine_import_circles() -> None:
    """Import circles inside engine/: the distinct simple cycles of its module import graph, every import
    followed (module level, inside functions, under ``if TYPE_CHECKING:``; a module importing its own
    package's ``__init__`` is not an edge). At most ENGINE_CIRCLES_MAX; 0 since the strategies see the engine
    through `engine.decoding.steps.StepRunner` and nothing in decoding/ imports engine/engine.py."""
    graph = {m: {t for t in _imports(p) if t in SOURCES and t.startswith("engine.") and t != m
                 and not m.startswith(t + ".")} for m, p in SOURCES.items() if m.startswith("engine.")}
    assert "engine.decoding.steps" in graph["engine.decoding.blocks"]  # the parser sees engine's imports
    assert not any(t == "engine.engine" for m, ts in graph.items() if m.startswith("engine.decoding.") for t in ts)
    circles = _simple_cycles(graph)
    print(f"engine/ import circles: {len(circles)}")
    assert len(circles) <= ENGINE_CIRCLES_MAX, circles
