"""Resolve a file's imports to files inside the workspace (per-language conventions)."""

from __future__ import annotations

from pathlib import Path

from tree_sitter import QueryCursor, Tree

from edit_server.context import languages

_JS_EXTS = ("", ".ts", ".tsx", ".js", ".jsx", ".mjs", ".d.ts", "/index.ts", "/index.tsx", "/index.js")


def import_strings(lang: str, tree: Tree, max_rows: int = 400) -> list[str]:
    """Module strings of the import statements in the first ``max_rows`` rows."""
    cur = QueryCursor(languages.queries(lang)[1])
    cur.set_point_range((0, 0), (max_rows, 0))
    out: list[str] = []
    for _, caps in cur.matches(tree.root_node):
        for node in caps.get("mod", []):
            if node.text:
                s = node.text.decode("utf-8", "replace").strip("\"'")
                if s not in out:
                    out.append(s)
    return out


def _first(cands: list[Path]) -> list[Path]:
    for c in cands:
        if c.is_file():
            return [c]
    return []


def resolve(lang: str, module: str, path: Path, roots: list[Path]) -> list[Path]:
    here = path.parent
    bases = [here, *roots, *(r / "src" for r in roots)]
    if lang == "python":
        dots = len(module) - len(module.lstrip("."))
        rel = module[dots:].replace(".", "/")
        if dots:
            base = here
            for _ in range(dots - 1):
                base = base.parent
            bases = [base]
        if not rel:
            return _first([b / "__init__.py" for b in bases])
        return _first([c for b in bases for c in (b / f"{rel}.py", b / rel / "__init__.py")])
    if lang in ("javascript", "typescript", "tsx"):
        if not module.startswith("."):
            return []
        return _first([Path(str(here / module) + ext) for ext in _JS_EXTS])
    if lang in ("c", "cpp"):
        return _first([b / module for b in [here, *roots, *(r / "include" for r in roots)]])
    if lang == "rust":
        sub = here if path.name in ("mod.rs", "lib.rs", "main.rs") else here / path.stem
        return _first([sub / f"{module}.rs", sub / module / "mod.rs"])
    if lang == "lua":
        rel = module.replace(".", "/")
        return _first([c for b in bases for c in (b / f"{rel}.lua", b / rel / "init.lua")])
    if lang == "java":
        rel = module.replace(".", "/") + ".java"
        return _first([b / rel for b in [*roots, *(r / "src/main/java" for r in roots), *(r / "src" for r in roots)]])
    if lang == "go":
        parts = module.split("/")
        for k in range(len(parts), 0, -1):
            for r in roots:
                d = r.joinpath(*parts[-k:])
                if d.is_dir():
                    return sorted(p for p in d.glob("*.go") if not p.name.endswith("_test.go"))[:4]
        return []
    return []
