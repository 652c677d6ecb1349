"""The "superseded import" next-edit candidate: no model (pure functions).

When the user's last edit of the document added an import that binds a name another import in the editable
region already binds (``from collections import OrderedDict`` over ``from ._compat import OrderedDict``;
``import {setTimeout as delay} from 'node:timers/promises'`` over ``import delay from 'delay'``), the old
binding is dead or a redefinition: taking that name out of the other import — the whole line when it binds
nothing else — is a likely next edit. `candidate` returns that region, or None.

* one-line imports of Python (``import a``, ``import a.b as c``, ``from m import a, b as c``) and
  JavaScript / TypeScript (``import x from 'm'``, ``import {a, b as c} from 'm'``, ``import * as ns from 'm'``,
  ``import type …``); a parenthesised or continued import, a star import, ``import a.b`` (a submodule) or
  anything else binds nothing here (never rewritten);
* the names are those the last hunk's added import lines bind and its removed lines did not (a line
  re-typed with one more name brings only that name);
* only import lines in the region the edit did not write change (a line left binding nothing goes, with a
  blank line it leaves doubled: `candidates.stranded_blanks`); text outside ``[start, end)`` never does.

Chosen on the training repositories' sessions (docs/QUALITY.md), never on the held-out ones. Its score for
the gate is `SCORE`, a fixed prior like the other rules'; it is gated as its own kind (``edit:import``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from edit_server.selectivity.candidates import HunkLike, diff_body, diff_lines, stranded_blanks

SCORE = 0.95  # the candidate's score (`gate.score` of its confidences)

_PY_FROM = re.compile(r"^(?P<head>\s*from\s+[\w.]+\s+import\s+)(?P<names>[^()\\#*]+?)(?P<tail>\s*(?:#.*)?)$")
_PY_IMPORT = re.compile(r"^(?P<head>\s*import\s+)(?P<names>[\w.]+(?:\s+as\s+\w+)?(?:\s*,\s*[\w.]+(?:\s+as\s+\w+)?)*)"
                        r"(?P<tail>\s*(?:#.*)?)$")
_JS = re.compile(r"^(?P<head>\s*import\s+(?:type\s+)?)(?P<clause>[^'\"]+?)(?P<tail>\s+from\s+(['\"]).*\4\s*;?\s*)$")
_JS_NAMED = re.compile(r"\{(?P<inner>[^{}]*)\}")
_AS = re.compile(r"^\s*(?:type\s+)?([\w$.]+)(?:\s+as\s+([\w$]+))?\s*$")


@dataclass(frozen=True)
class Import:
    """One parsed import line: its items (as written) and the name each binds; `without` rewrites it."""

    line: str
    kind: str  # "py-from" | "py-import" | "js"
    items: tuple[str, ...]
    bound: tuple[str, ...]

    def without(self, names: set[str]) -> str | None:
        """The line with the items binding ``names`` taken out; None: nothing left (delete the line)."""
        keep = [it for it, b in zip(self.items, self.bound, strict=True) if b not in names]
        if not keep:
            return None
        if self.kind == "js":
            return _js_without(self.line, names)
        m = (_PY_FROM if self.kind == "py-from" else _PY_IMPORT).match(self.line)
        assert m is not None
        return m.group("head") + ", ".join(k.strip() for k in keep) + m.group("tail")


def _bound(item: str) -> str | None:
    """The name an import item binds (``a``, ``a as b``, ``type a``); None for a dotted module without an
    alias (``import os.path`` binds ``os`` but says more: a submodule is loaded — never taken out)."""
    m = _AS.match(item)
    if m is None:
        return None
    if m.group(2):
        return m.group(2)
    return m.group(1) if "." not in m.group(1) else None


def parse(line: str) -> Import | None:
    """The import a line holds (Python or JavaScript / TypeScript, one line), or None."""
    text = line.rstrip("\r\n")
    for kind, rx in (("py-from", _PY_FROM), ("py-import", _PY_IMPORT)):
        m = rx.match(text)
        if m:
            items = tuple(m.group("names").split(","))
            bound = tuple(_bound(it) for it in items)
            if None in bound or not items:
                return None
            return Import(text, kind, items, tuple(b for b in bound if b))
    m = _JS.match(text)
    if m is None:
        return None
    defaults, named, _ = _js_clause(m.group("clause"))
    items = tuple(defaults + named)
    bound = tuple(_js_bound(it) for it in items)
    if not items or None in bound:
        return None
    return Import(text, "js", items, bound)  # type: ignore[arg-type]


def _js_bound(item: str) -> str | None:
    """The name a JS / TS import item binds (``x``, ``a as b``, ``type a``, ``* as ns``), or None."""
    star = re.match(r"^\*\s+as\s+([\w$]+)$", item)
    return star.group(1) if star else _bound(item)


def _js_clause(clause: str) -> tuple[list[str], list[str], str]:
    """A JS / TS import clause's items outside the braces (default, ``* as ns``) and inside them (stripped),
    and the braces' inner padding (the line's own style: ``{a}`` or ``{ a }``)."""
    named = _JS_NAMED.search(clause)
    rest = clause[:named.start()] + clause[named.end():] if named else clause
    inner = named.group("inner") if named else ""
    return ([p.strip() for p in rest.split(",") if p.strip()], [p.strip() for p in inner.split(",") if p.strip()],
            " " if inner.startswith(" ") else "")


def _js_without(line: str, names: set[str]) -> str | None:
    m = _JS.match(line)
    assert m is not None
    defaults, named, pad = _js_clause(m.group("clause"))
    parts = [p for p in defaults if _js_bound(p) not in names]
    inner = [p for p in named if _js_bound(p) not in names]
    if inner:
        parts.append("{" + pad + ", ".join(inner) + pad + "}")
    if not parts:
        return None
    return m.group("head") + ", ".join(parts) + m.group("tail")


def new_names(diff: str) -> set[str]:
    """Names the added import lines of a unified diff bind that its removed lines did not."""
    added: set[str] = set()
    removed: set[str] = set()
    for tag, body in diff_body(diff):
        imp = parse(body) if tag in ("+", "-") else None
        if imp is not None:
            (added if tag == "+" else removed).update(imp.bound)
    return added - removed


def candidate(text: str, start: int, end: int, path: str, history: Sequence[HunkLike]) -> str | None:
    """The region ``text[start:end]`` with the names the last import edit of ``path`` bound anew taken out
    of the region's other imports, or None."""
    last = next((h for h in reversed(history) if h.path == path), None)
    if last is None:
        return None
    names = new_names(last.diff)
    if not names:
        return None
    _, _, rows = diff_lines(last.diff)
    base = text.count("\n", 0, start)
    lines = text[start:end].splitlines(keepends=True)
    out = list(lines)
    drop: set[int] = set()
    for i, line in enumerate(lines):
        imp = parse(line) if base + i not in rows else None
        if imp is None or not names & set(imp.bound):
            continue
        rest = imp.without(names)
        if rest is None:
            drop.add(i)
        else:
            out[i] = rest + line[len(line.rstrip("\r\n")):]
    if out == lines and not drop:
        return None
    return "".join(ln for i, ln in enumerate(out) if i not in drop | stranded_blanks(lines, drop))
