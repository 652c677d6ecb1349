"""Which declaration a name refers to on a line: every binding site of a document (a parameter, an
assignment's or a ``let``'s target, a loop variable, an import alias, a function's name) and the function
scope it belongs to, read from the tree-sitter tree (pure functions, no model).

A carried rename follows the binding it renamed: after ``resp`` → ``res`` at its ``:=``, the lines of the
function that still say ``resp`` refer to nothing (their binding is gone) and are the next edit; a
``count`` in another function has its own ``let mut count`` and is not. After a rename at a use (the use
now names something unbound), the declaration it used to refer to is the place. Languages without a
grammar here, or a tree with too many errors, have no bindings (``None``): the callers then fall back to
the text's rows alone.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from functools import lru_cache

from tree_sitter import Node

from edit_server.context import languages

# node type -> the field whose identifiers (through the patterns below) it binds; "" any child that is not
# a type, a value or a body
_BINDERS = {
    # Python
    "parameters": "", "lambda_parameters": "", "typed_parameter": "", "default_parameter": "name",
    "typed_default_parameter": "name", "assignment": "left", "for_statement": "left", "for_in_clause": "left",
    "as_pattern_target": "", "named_expression": "name", "aliased_import": "alias", "global_statement": "",
    "nonlocal_statement": "",
    # JavaScript / TypeScript
    "variable_declarator": "name", "formal_parameters": "", "required_parameter": "pattern",
    "optional_parameter": "pattern", "arrow_function": "parameter", "catch_clause": "parameter",
    "for_in_statement": "left", "import_clause": "", "namespace_import": "", "assignment_pattern": "left",
    # Go
    "short_var_declaration": "left", "var_spec": "name", "const_spec": "name", "parameter_declaration": "name",
    "variadic_parameter_declaration": "name", "range_clause": "left",
    # Rust
    "let_declaration": "pattern", "parameter": "pattern", "closure_parameters": "", "for_expression": "pattern",
    "let_condition": "pattern", "match_arm": "pattern",
}
# declarations whose name binds in the scope around them, not in their own
_NAMED = {"function_definition", "class_definition", "function_declaration", "generator_function_declaration",
          "class_declaration", "function_item", "const_item", "static_item", "struct_item", "enum_item",
          "method_declaration", "type_spec"}
# patterns a binding passes through on its way to its binder (a tuple, a destructuring, ``mut``, ``Some(x)``)
_PATTERNS = {"pattern_list", "tuple_pattern", "list_pattern", "list_splat_pattern", "dictionary_splat_pattern",
             "expression_list", "array_pattern", "object_pattern", "pair_pattern", "rest_pattern", "match_pattern",
             "tuple_struct_pattern", "reference_pattern", "ref_pattern", "mut_pattern", "captured_pattern",
             "or_pattern", "slice_pattern", "struct_pattern", "field_pattern", "shorthand_field_identifier"}
_NOT_BOUND = ("type", "value", "body", "return_type", "right", "key", "condition")  # fields that only use names
SCOPES = {"function_definition", "lambda", "function_declaration", "generator_function_declaration",
          "function_expression", "function", "arrow_function", "method_definition", "function_item",
          "closure_expression", "method_declaration", "func_literal"}
# declarations a use refers to only after their statement (``let line = line.trim()`` uses the line before)
_LATE = {"let_declaration", "short_var_declaration", "variable_declarator", "var_spec", "const_spec"}
_IDENTS = {"identifier", "shorthand_property_identifier_pattern", "shorthand_property_identifier", "field_identifier",
           "type_identifier"}
# a use that is also a field's name (``{port}`` in JavaScript, ``Config { name }`` in Rust): renamed, the
# field keeps its name (``{port: listenPort}``)
_SHORTHAND = {"shorthand_property_identifier", "shorthand_field_initializer"}
MAX_ERRORS = 0.2  # a tree whose error nodes cover more than this share of the text tells nothing


@dataclass(frozen=True)
class Binding:
    row: int  # where the name is bound
    col: int
    scope: tuple[int, int]  # the rows of the function it is bound in ((-1, big): the module)
    start: tuple[int, int] = (-1, 0)  # (row, col) from which a use refers to it (a ``let``: after its statement)


MODULE = (-1, 1 << 30)


class Bindings:
    """A document's binding sites by name."""

    def __init__(self, sites: dict[str, list[Binding]], labels: dict[int, frozenset[int]] | None = None,
                 refs: dict[str, list[tuple[int, int]]] | None = None,
                 shorthands: frozenset[tuple[int, int]] = frozenset()) -> None:
        self._sites = sites
        self._labels = labels or {}
        self._refs = refs or {}
        self.shorthands = shorthands  # (row, column) of the uses that also name a field

    def names(self) -> list[str]:
        return sorted(self._sites)

    def refs(self, name: str) -> list[tuple[int, int]]:
        """Where ``name`` is used (not bound, not a label) in code: (row, column)."""
        return self._refs.get(name, [])

    def sites(self, name: str) -> list[Binding]:
        return self._sites.get(name, [])

    def visible(self, name: str, row: int, col: int = 1 << 30) -> list[Binding]:
        """The bindings of ``name`` a use at ``row``, ``col`` can refer to (its function's, an enclosing
        one's, the module's; a declaration's only after it)."""
        return [b for b in self.sites(name) if b.scope[0] <= row <= b.scope[1] and (row, col) >= b.start]

    def binds_at(self, name: str, row: int) -> bool:
        return any(b.row == row for b in self.sites(name))

    def labels(self, row: int) -> frozenset[int]:
        """The columns of ``row`` where a name is a label, not a reference: a keyword argument's name
        (``maxsize=maxsize``: a rename of the variable keeps the keyword)."""
        return self._labels.get(row, frozenset())


def _field_children(node: Node, field: str) -> list[Node]:
    return list(node.children_by_field_name(field))


def _is_binding(ident: Node) -> Node | None:
    """The binder node that binds ``ident`` there, or None for a use."""
    child, parent = ident, ident.parent
    while parent is not None and parent.type in _PATTERNS:
        if parent.type in ("pair_pattern", "tuple_struct_pattern", "struct_pattern") and any(
                child == n for f in ("key", "type") for n in _field_children(parent, f)):
            return None
        child, parent = parent, parent.parent
    if parent is None:
        return None
    if parent.type in _NAMED and any(child == n for n in _field_children(parent, "name")):
        return parent
    field = _BINDERS.get(parent.type)
    if field is None:
        return None
    if field:
        return parent if any(child == n for n in _field_children(parent, field)) else None
    return None if any(child == n for f in _NOT_BOUND for n in _field_children(parent, f)) else parent


def _scope(node: Node | None) -> tuple[int, int]:
    while node is not None and node.type not in SCOPES:
        node = node.parent
    return MODULE if node is None else (node.start_point.row, node.end_point.row)


def _walk(node: Node) -> Iterator[Node]:
    stack = [node]
    while stack:
        n = stack.pop()
        if n.type in _IDENTS:
            yield n
        stack.extend(reversed(n.children))


def _errors(node: Node) -> int:
    """Bytes under error nodes."""
    if node.type == "ERROR" or node.is_missing:
        return node.end_byte - node.start_byte
    return sum(_errors(c) for c in node.children) if node.has_error else 0


@lru_cache(maxsize=8)
def of(text: str, path: str) -> Bindings | None:
    """The bindings of ``text`` (the language ``path`` names), None without a grammar or with a broken tree."""
    spec = languages.spec_for(path)
    if spec is None:
        return None
    data = text.encode("utf-8")
    try:
        tree = languages.parser(spec.name).parse(data)
    except (ValueError, RuntimeError):
        return None
    if data and _errors(tree.root_node) > MAX_ERRORS * len(data):
        return None
    sites: dict[str, list[Binding]] = {}
    labels: dict[int, set[int]] = {}
    refs: dict[str, list[tuple[int, int]]] = {}
    shorthands: set[tuple[int, int]] = set()
    starts = [0] + [i + 1 for i, b in enumerate(data) if b == 10]

    def col(row: int, byte: int) -> int:  # a character column, as the text's lines count them
        return len(data[starts[row]:byte].decode("utf-8", "replace"))

    for ident in _walk(tree.root_node):
        row = ident.start_point.row
        parent = ident.parent
        if parent is not None and parent.type == "keyword_argument" and parent.child_by_field_name("name") == ident:
            labels.setdefault(row, set()).add(col(row, ident.start_byte))
            continue
        name = data[ident.start_byte:ident.end_byte].decode("utf-8", "replace")
        binder = _is_binding(ident)
        if binder is None:
            if ident.type in ("identifier", "shorthand_property_identifier"):
                at = (row, col(row, ident.start_byte))
                refs.setdefault(name, []).append(at)
                if ident.type in _SHORTHAND or parent is not None and parent.type in _SHORTHAND:
                    shorthands.add(at)
            continue
        # a declaration's own name belongs to the scope around it; a parameter to the function it names
        scope = _scope(binder.parent if binder.type in _NAMED else binder)
        end = binder.end_point
        # a module's names are used from functions anywhere in it
        late = binder.type in _LATE and scope != MODULE
        start = (end.row, col(end.row, binder.end_byte)) if late else (-1, 0)
        sites.setdefault(name, []).append(Binding(row, col(row, ident.start_byte), scope, start))
    return Bindings(sites, {r: frozenset(c) for r, c in labels.items()}, refs, frozenset(shorthands))
