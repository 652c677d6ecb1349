"""Grammar registry: file extension → tree-sitter language + the queries the context builder uses.

Grammars come from the per-language wheels (`tree-sitter-python`, ...), loaded lazily; never
`tree-sitter-language-pack` (it downloads at run time). Unknown extensions get ``None`` and the
builder falls back to line-based logic.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from functools import cache
from pathlib import PurePath

from tree_sitter import Language, Parser, Query


@dataclass(frozen=True)
class LangSpec:
    name: str
    module: str  # grammar wheel module
    func: str  # its language function
    exts: tuple[str, ...]
    definitions: str  # query with @def (whole definition) and @name captures
    imports: str  # query with @mod captures (module path / file string)
    identifiers: tuple[str, ...]  # node types that are identifier uses


_PY_DEFS = """
(function_definition name: (_) @name) @def
(class_definition name: (_) @name) @def
(module (expression_statement (assignment left: (identifier) @name)) @def)
"""
_JS_DEFS = """
(function_declaration name: (_) @name) @def
(generator_function_declaration name: (_) @name) @def
(class_declaration name: (_) @name) @def
(method_definition name: (_) @name) @def
(program (lexical_declaration (variable_declarator name: (identifier) @name)) @def)
(program (variable_declaration (variable_declarator name: (identifier) @name)) @def)
(program (export_statement (lexical_declaration (variable_declarator name: (identifier) @name)) @def))
"""
_TS_DEFS = _JS_DEFS + """
(interface_declaration name: (_) @name) @def
(type_alias_declaration name: (_) @name) @def
(enum_declaration name: (_) @name) @def
"""
_JS_IMPORTS = """
(import_statement source: (string (string_fragment) @mod))
(export_statement source: (string (string_fragment) @mod))
"""
_C_DEFS = """
(function_definition declarator: (function_declarator declarator: (_) @name)) @def
(declaration declarator: (function_declarator declarator: (_) @name)) @def
(struct_specifier name: (_) @name body: (_)) @def
(enum_specifier name: (_) @name body: (_)) @def
(type_definition declarator: (type_identifier) @name) @def
(preproc_def name: (_) @name) @def
(preproc_function_def name: (_) @name) @def
"""
_C_IMPORTS = "(preproc_include path: (string_literal (string_content) @mod))"

LANGUAGES: tuple[LangSpec, ...] = (
    LangSpec("python", "tree_sitter_python", "language", (".py", ".pyi"), _PY_DEFS, """
(import_statement name: (dotted_name) @mod)
(import_statement name: (aliased_import name: (dotted_name) @mod))
(import_from_statement module_name: (_) @mod)
""", ("identifier",)),
    LangSpec("javascript", "tree_sitter_javascript", "language", (".js", ".jsx", ".mjs", ".cjs"),
             _JS_DEFS, _JS_IMPORTS, ("identifier", "property_identifier")),
    LangSpec("typescript", "tree_sitter_typescript", "language_typescript", (".ts", ".mts", ".cts"),
             _TS_DEFS, _JS_IMPORTS, ("identifier", "property_identifier", "type_identifier")),
    LangSpec("tsx", "tree_sitter_typescript", "language_tsx", (".tsx",),
             _TS_DEFS, _JS_IMPORTS, ("identifier", "property_identifier", "type_identifier")),
    LangSpec("rust", "tree_sitter_rust", "language", (".rs",), """
(function_item name: (_) @name) @def
(struct_item name: (_) @name) @def
(enum_item name: (_) @name) @def
(trait_item name: (_) @name) @def
(type_item name: (_) @name) @def
(const_item name: (_) @name) @def
(static_item name: (_) @name) @def
(macro_definition name: (_) @name) @def
""", "(mod_item name: (identifier) @mod !body)",
             ("identifier", "type_identifier", "field_identifier")),
    LangSpec("go", "tree_sitter_go", "language", (".go",), """
(function_declaration name: (_) @name) @def
(method_declaration name: (_) @name) @def
(type_spec name: (_) @name) @def
(const_spec name: (_) @name) @def
""", "(import_spec path: (interpreted_string_literal) @mod)",
             ("identifier", "type_identifier", "field_identifier")),
    LangSpec("java", "tree_sitter_java", "language", (".java",), """
(class_declaration name: (_) @name) @def
(interface_declaration name: (_) @name) @def
(enum_declaration name: (_) @name) @def
(record_declaration name: (_) @name) @def
(method_declaration name: (_) @name) @def
""", "(import_declaration (scoped_identifier) @mod)", ("identifier", "type_identifier")),
    LangSpec("c", "tree_sitter_c", "language", (".c", ".h"), _C_DEFS, _C_IMPORTS,
             ("identifier", "type_identifier", "field_identifier")),
    LangSpec("cpp", "tree_sitter_cpp", "language", (".cc", ".cpp", ".cxx", ".hpp", ".hh", ".hxx"),
             _C_DEFS + """
(class_specifier name: (_) @name body: (_)) @def
(namespace_definition name: (_) @name) @def
""", _C_IMPORTS, ("identifier", "type_identifier", "field_identifier", "namespace_identifier")),
    LangSpec("lua", "tree_sitter_lua", "language", (".lua",), """
(function_declaration name: (_) @name) @def
""", """
((function_call name: (identifier) @f arguments: (arguments (string content: (string_content) @mod)))
 (#eq? @f "require"))
""", ("identifier",)),
)

_BY_EXT = {ext: spec for spec in LANGUAGES for ext in spec.exts}


def spec_for(path: str | PurePath) -> LangSpec | None:
    return _BY_EXT.get(PurePath(path).suffix.lower())


_FAMILY = {"javascript": "js", "typescript": "js", "tsx": "js", "c": "c", "cpp": "c"}


def same_family(path: str | PurePath, lang: str | None) -> bool:
    """Can code in ``lang`` use definitions from ``path``? (JS/TS/TSX share; C/C++ share.)"""
    spec = spec_for(path)
    if lang is None or spec is None:
        return True
    return _FAMILY.get(spec.name, spec.name) == _FAMILY.get(lang, lang)


@cache
def language(name: str) -> Language:
    spec = next(s for s in LANGUAGES if s.name == name)
    return Language(getattr(importlib.import_module(spec.module), spec.func)())


def parser(name: str) -> Parser:
    """A new parser (parsers are not thread-safe: one per document / per worker)."""
    return Parser(language(name))


@cache
def queries(name: str) -> tuple[Query, Query, Query]:
    """(definitions, imports, identifiers) queries of a language, compiled once."""
    spec = next(s for s in LANGUAGES if s.name == name)
    lang = language(name)
    idents = Query(lang, "[" + " ".join(f"({t})" for t in spec.identifiers) + "] @id")
    return Query(lang, spec.definitions), Query(lang, spec.imports), idents
