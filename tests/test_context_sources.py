"""Definitions (tree-sitter queries, symbol index) and import resolution, per language."""

from __future__ import annotations

from pathlib import Path

import pytest

from edit_server.context import ContextBuilder
from edit_server.context.symbols import SymbolIndex, extract, identifiers_near
from edit_server.context.syntax import Document
from engine.tokenizer import Tokenizer
from tests.context_util import options

FIXTURES = Path(__file__).parent / "fixtures" / "context"

# (file, source with one import of "lib" and a use of `helper`, lib file, lib source)
CASES = {
    "python": ("main.py", "from lib import helper\n\ndef run():\n    return helper(1)\n",
               "lib.py", "def helper(x):\n    return x\n"),
    "javascript": ("main.js", 'import { helper } from "./lib";\nfunction run() { return helper(1); }\n',
                   "lib.js", "export function helper(x) {\n  return x;\n}\n"),
    "typescript": ("main.ts", 'import { helper } from "./lib";\nfunction run(): number { return helper(1); }\n',
                   "lib.ts", "export function helper(x: number): number {\n  return x;\n}\n"),
    "rust": ("src/main.rs", "mod lib;\nfn run() -> i32 { helper(1) }\n",
             "src/lib.rs", "pub fn helper(x: i32) -> i32 {\n    x\n}\n"),
    "go": ("main.go", 'package main\n\nimport "example.com/m/lib"\n\nfunc run() int { return helper(1) }\n',
           "lib/lib.go", "package lib\n\nfunc helper(x int) int {\n\treturn x\n}\n"),
    "java": ("Main.java", "import lib.Lib;\nclass Main { int run() { return helper(1); } }\n",
             "lib/Lib.java", "package lib;\npublic class Lib {\n  static int helper(int x) { return x; }\n}\n"),
    "c": ("main.c", '#include "lib.h"\nint run(void) { return helper(1); }\n',
          "lib.h", "int helper(int x);\n"),
    "cpp": ("main.cpp", '#include "lib.hpp"\nint run() { return helper(1); }\n',
            "lib.hpp", "int helper(int x) {\n  return x;\n}\n"),
    "lua": ("main.lua", 'local lib = require("lib")\nlocal function run() return helper(1) end\n',
            "lib.lua", "local M = {}\nfunction helper(x)\n  return x\nend\nreturn M\n"),
}


@pytest.mark.parametrize("lang", sorted(CASES))
def test_definition_and_import_per_language(tmp_path: Path, lang: str) -> None:
    main, src, lib, lib_src = CASES[lang]
    for name, text in ((main, src), (lib, lib_src)):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    b = ContextBuilder([tmp_path], Tokenizer.byte_level(), options(git=False))
    assert b.wait_idle(30)
    r = b.build_fim(str(tmp_path / main), src, src.index("helper(1)") + 2, [])
    b.close()
    got: dict[tuple[str, str], list[str]] = {}
    for s in r.prompt.sections:
        got.setdefault((s.kind, s.path), []).append(s.text)
    assert any("helper" in d.splitlines()[0] for d in got.get(("definition", lib), [])), got
    # the import target's outline (unless identical to a definition already included: deduplicated)
    assert ("import", lib) in got or got[("definition", lib)] == [lib_src], got


def test_extract_snippets_and_identifiers() -> None:
    text = "def big(x):\n" + "".join(f"    y{i} = x\n" for i in range(30)) + "\nclass K:\n    pass\n"
    doc = Document.open("a.py", text, 1)
    defs = {d.name: d for d in extract("python", doc.tree, text, "a.py", max_lines=5)}
    assert defs["big"].text.count("\n") == 6 and defs["big"].text.endswith("    ...\n")
    assert (defs["K"].start_line, defs["K"].end_line) == (32, 33)
    names = identifiers_near("python", doc.tree, doc.lines, 3, above=2, below=1)
    assert names[0] in ("y2", "x") and "big" not in names  # only near the row; nearest first


def test_index_updates_incrementally(tmp_path: Path) -> None:
    f = tmp_path / "m.py"
    f.write_text("def alpha():\n    pass\n")
    idx = SymbolIndex()
    assert idx.index_file(f) and not idx.index_file(f)  # unchanged mtime: skipped
    assert [d.name for d in idx.lookup("alpha")] == ["alpha"]
    idx.set_file(str(f), [])
    assert idx.lookup("alpha") == []


def test_definitions_only_from_the_same_language_family(tmp_path: Path) -> None:
    src = "def run():\n    return helper(1)\n"
    (tmp_path / "main.py").write_text(src)
    (tmp_path / "util.py").write_text("def helper(x):\n    return x\n")
    (tmp_path / "web.ts").write_text("export function helper(x: number): number {\n  return x;\n}\n")
    (tmp_path / "app.js").write_text("function other() {}\n")
    b = ContextBuilder([tmp_path], Tokenizer.byte_level(), options(git=False))
    assert b.wait_idle(30)
    r = b.build_fim(str(tmp_path / "main.py"), src, src.index("helper(1)") + 2, [])
    b.close()
    paths = {s.path for s in r.prompt.sections if s.kind == "definition"}
    assert "util.py" in paths and "web.ts" not in paths, paths
    from edit_server.context.languages import same_family
    assert same_family("a.tsx", "javascript") and same_family("x.h", "cpp")
    assert not same_family("a.rs", "go") and same_family("README", "python")
