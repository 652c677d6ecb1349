"""Started edits completed: the second half of an edit whose first half the user just typed (pure functions,
no model).

* **a new parameter stored** (`stored_parameter`): a function's signature gained a parameter and its body
  stores the parameters before it (``self.timeout = timeout``, ``this.email = email;``, ``token: token,``,
  a struct literal's ``name,``): the new one is stored the same way — after the store of the field declared
  before it where the type declares it, else after the store of the parameter before it — with a
  ``key: value`` line's value column kept (gofmt);
* **a new member listed** (`member_entry`): a member added to an enumeration (an enum's variant, a constant of an
  ``iota`` block): its entry in the listing that names the members in order (a switch's case, a map's key),
  after the member before's and written as that one is, a string spelling the name spelt the same way
  (``case StateRunning: return "running"`` → ``case StateDraining: return "draining"``);
* **a pasted copy adapted** (`adapted_copy`): lines just pasted as a copy of others, then one word of the
  copy changed (``phoneInput`` → ``emailInput``, ``"/users"`` → ``"/orders"``): the part of the word that
  changed (``phone`` → ``email``) changed in the rest of the copy, in each case it is written in
  (``handleUsers`` → ``handleOrders``, ``self._width`` → ``self._height``).

Each returns ``(row, rows, lines)`` rewrites — the document rows ``[row, row + rows)`` replaced by
``lines`` — for `propose` to place in the editable region or offer as a jump; whether one is shown is the
location model's call.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from edit_server.nextedit import carry as carrying
from edit_server.selectivity.candidates import HunkLike, diff_body, diff_lines

Rewrite = tuple[int, int, list[str]]  # first row, rows replaced, the lines written there
_WORD = re.compile(r"\w+")
_SELFISH = frozenset({"self", "this", "cls", "Self"})
_KEY_VALUE = re.compile(r"^(\s*)(\w+):(\s+)(\S.*)$")
_STORE_KEYWORDS = frozenset({"self", "this", "Self"})
_MODIFIERS = r"(?:(?:pub(?:\([\w:]+\))?|private|public|protected|readonly|static|final|var|let|const|mut)\s+)*"


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _params(header: str) -> list[str] | None:
    """The parameter names of the first parenthesised list of ``header`` (None: no such list)."""
    i = header.find("(")
    if i < 0:
        return None
    depth, j = 0, i
    for j in range(i, len(header)):
        depth += {"(": 1, "[": 1, "{": 1, "<": 1, ")": -1, "]": -1, "}": -1, ">": -1}.get(header[j], 0)
        if depth == 0:
            break
    else:
        return None
    inner = header[i + 1:j]
    parts, depth, cur = [], 0, ""
    for ch in inner:
        depth += {"(": 1, "[": 1, "{": 1, "<": 1, ")": -1, "]": -1, "}": -1, ">": -1}.get(ch, 0)
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    parts.append(cur)
    names = []
    for part in parts:
        words = [w for w in _WORD.findall(part.split("=")[0].split(":")[0]) if w not in ("mut", "ref")]
        if words and not part.strip().startswith("&self"):
            names.append(words[0])
    return names


def _body(lines: Sequence[str], header: int) -> range:
    """The rows after ``header`` indented deeper than it (its body)."""
    ind = _indent(lines[header])
    r = header + 1
    while r < len(lines) and (not lines[r].strip() or _indent(lines[r]) > ind):
        r += 1
    return range(header + 1, r)


def _store(line: str, name: str) -> bool:
    """Whether ``line`` only stores ``name`` (``self.name = name``, ``name: name,``, ``name,``)."""
    words = _WORD.findall(line)
    return (name in words and set(words) <= {name} | _STORE_KEYWORDS and line.strip()[-1:] in (",", ";", "")
            or bool(re.fullmatch(rf"\s*(?:self|this)\.{re.escape(name)}\s*=\s*{re.escape(name)}\s*;?\s*", line)))


def _retyped(template: str, old: str, new: str) -> str:
    """``template`` (the store of ``old``) for ``new``, a ``key:   value`` line's value column kept."""
    line = re.sub(rf"\b{re.escape(old)}\b", new, template)
    m, t = _KEY_VALUE.match(line), _KEY_VALUE.match(template)
    if m and t and m.group(2) == new:
        col = len(t.group(1)) + len(t.group(2)) + 1 + len(t.group(3))
        line = f"{m.group(1)}{new}:{' ' * max(1, col - len(m.group(1)) - len(new) - 1)}{m.group(4)}"
    return line


def _declared_before(lines: Sequence[str], name: str, skip: range) -> str | None:
    """The field declared just before ``name`` in the type that declares it as a field (outside ``skip``)."""
    decl = re.compile(rf"^\s*{_MODIFIERS}(\w+)\s*[?!]?\s*(?::|\s\S)")
    for r, line in enumerate(lines):
        m = decl.match(line)
        if r in skip or not m or m.group(1) != name or "(" in line:
            continue
        for q in range(r - 1, max(-1, r - 40), -1):
            prev = decl.match(lines[q])
            if not lines[q].strip():
                continue
            if prev is None or _indent(lines[q]) != _indent(line) or "(" in lines[q]:
                return None
            return prev.group(1)
    return None


def stored_parameter(text: str, path: str, history: Sequence[HunkLike]) -> list[Rewrite]:
    mine = [h for h in history if h.path == path]
    if not mine:
        return []
    lines = text.split("\n")
    out: list[Rewrite] = []
    for old, new in carrying.line_pairs(mine[-1].diff)[0]:
        before, after = _params(old), _params(new)
        if before is None or after is None or len(after) <= len(before) or not set(before) < set(after):
            continue
        header = next((r for r in sorted(diff_lines(mine[-1].diff)[2]) if r < len(lines) and lines[r] == new), None)
        if header is None:
            continue
        body = _body(lines, header)
        for p in (x for x in after if x not in before and x not in _SELFISH):
            if any(re.search(rf"\b{re.escape(p)}\b", lines[r]) for r in body):
                continue  # stored or used already: nothing was left to do
            earlier = [q for q in after[:after.index(p)] if q not in _SELFISH][::-1]
            stores = {q: r for q in earlier for r in body if _store(lines[r], q)}
            template = next((q for q in earlier if q in stores), None)
            if template is None:
                continue
            anchor = stores[template]
            field = _declared_before(lines, p, body)
            if field is not None and field != template:
                keyed = re.compile(rf"^\s*(?:(?:self|this)\.)?{re.escape(field)}\b\s*[:=,]")
                anchor = next((r for r in body if keyed.match(lines[r])), anchor)
            out.append((anchor, 1, [lines[anchor], _retyped(lines[stores[template]], template, p)]))
    return out


def _words(s: str) -> list[str]:
    """An identifier's words (``selectUserName`` → select, User, Name; ``user_name`` → user, name)."""
    return re.findall(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|\d+", s)


def _stem(old: str, new: str) -> tuple[str, str] | None:
    """The words that differ between two identifiers sharing the rest (``phoneInput``/``emailInput`` →
    phone, email)."""
    a, b = _words(old), _words(new)
    if not a or not b:
        return None
    i = 0
    while i < min(len(a), len(b)) and a[i] == b[i]:
        i += 1
    j = 0
    while j < min(len(a), len(b)) - i and a[-1 - j] == b[-1 - j]:
        j += 1
    da, db = a[i:len(a) - j], b[i:len(b) - j]
    if len(da) != 1 or len(db) != 1 or da[0].lower() == db[0].lower():
        return None
    return da[0], db[0]


def _cased(word: str, like: str) -> str:
    return word.upper() if like.isupper() and len(like) > 1 else word[:1].upper() + word[1:].lower() \
        if like[:1].isupper() else word.lower()


def _restem(line: str, old: str, new: str) -> str:
    """``line`` with the word ``old`` replaced by ``new`` wherever it is a word of an identifier or a
    string's word, in the case it is written in there."""
    def sub(m: re.Match[str]) -> str:
        return _cased(new, m.group(0))

    variants = {old.lower(), old[:1].upper() + old[1:].lower(), old.upper()}
    pattern = "|".join(sorted((re.escape(v) for v in variants), key=len, reverse=True))
    # a word of an identifier: bounded by a non-letter, a case change or the identifier's edge
    return re.sub(rf"(?:(?<=[^A-Za-z])|^|(?<=[a-z])(?=[A-Z]))(?:{pattern})(?=[^a-z]|$)", sub, line)


def adapted_copy(text: str, path: str, history: Sequence[HunkLike]) -> list[Rewrite]:
    mine = [h for h in history if h.path == path]
    if len(mine) < 2:
        return []
    pasted = [body for tag, body in diff_body(mine[-2].diff) if tag == "+"]
    if not pasted or any(tag == "-" for tag, _ in diff_body(mine[-2].diff)) or not "".join(pasted).strip():
        return []
    lines = text.split("\n")
    pairs = carrying.line_pairs(mine[-1].diff)[0]
    if len(pairs) != 1:
        return []
    a, b = pairs[0]
    wa, wb = _WORD.findall(a), _WORD.findall(b)
    diff = [(x, y) for x, y in zip(wa, wb, strict=False) if x != y] if len(wa) == len(wb) else []
    if len(diff) != 1:
        return []
    stem = _stem(*diff[0])
    if stem is None:
        return []
    # the copy as it is now: the pasted lines, one of them changed
    copy = [b if line == a else line for line in pasted]
    start = next((r for r in range(len(lines) - len(copy) + 1) if lines[r:r + len(copy)] == copy), None)
    if start is None:
        return []
    if "\n".join(pasted).strip("\n") not in text:  # the original the copy was made from is still there
        return []
    new = [_restem(line, *stem) for line in copy]
    return [(start, len(copy), new)] if new != copy else []


_MEMBER = re.compile(r"^(\s*)([A-Za-z_]\w*)\b")
LISTING_GAP = 4  # rows between a listing's entries for consecutive members


def _siblings(lines: Sequence[str], row: int) -> list[int]:
    """The rows of the member block ``row`` sits in: neighbouring rows at its indent, each naming a member."""
    ind = _indent(lines[row])

    def member(r: int) -> bool:
        return 0 <= r < len(lines) and bool(_MEMBER.match(lines[r])) and _indent(lines[r]) == ind \
            and "(" not in lines[r].split("=")[0]

    a = row
    while member(a - 1):
        a -= 1
    b = row
    while member(b + 1):
        b += 1
    return list(range(a, b + 1))


def _first_word(line: str) -> str:
    m = _MEMBER.match(line)
    return m.group(2) if m else ""


def _has(line: str, word: str) -> bool:
    return bool(re.search(rf"(?<![\w]){re.escape(word)}(?![\w])", line))


def _entry_of(line: str, member: str, other: str) -> str:
    """``line`` (a listing's entry for ``member``) as the entry for ``other``."""
    out = re.sub(rf"(?<![\w]){re.escape(member)}(?![\w])", other, line)
    stem = _stem(member, other)
    return _restem(out, *stem) if stem is not None else out


def member_entry(text: str, path: str, history: Sequence[HunkLike]) -> list[Rewrite]:
    """A member added to an enumeration (an enum's variant, a constant of an ``iota`` block): its entry in
    the listing that names the members in order (a switch's cases, a map's keys), after the member before
    it, written as that member's entry is with the member's name — and a string there that spells the
    member's name, in the case it is spelt."""
    mine = [h for h in history if h.path == path]
    if not mine:
        return []
    body = list(diff_body(mine[-1].diff))
    added = [b for tag, b in body if tag == "+"]
    if len(added) != 1 or any(tag == "-" for tag, _ in body) or not _MEMBER.match(added[0]):
        return []
    lines = text.split("\n")
    rows = [r for r in sorted(diff_lines(mine[-1].diff)[2]) if r < len(lines) and lines[r] == added[0]]
    if not rows:
        return []
    m_row = rows[0]
    block = _siblings(lines, m_row)
    names = [_first_word(lines[r]) for r in block]
    at = block.index(m_row)
    new = names[at]
    if at == 0 or len(block) < 3 or len(set(names)) != len(names) or sum(_has(x, new) for x in lines) != 1:
        return []
    if not all(n[:1].isupper() for n in names):  # members are named like constants or types, not locals
        return []
    prev, before = names[at - 1], names[at - 2] if at >= 2 else None
    after = names[at + 1] if at + 1 < len(names) else None
    out: list[Rewrite] = []
    for r, line in enumerate(lines):
        if r in block or not _has(line, prev):
            continue
        # a listing in order: the entry of the member before just above, or of the one after just below, is
        # this row with that member's name (and its spelling in a string)
        if not (before and _entry_of(line, prev, before) in lines[max(0, r - LISTING_GAP):r]
                or after and _entry_of(line, prev, after) in lines[r + 1:r + 1 + LISTING_GAP]):
            continue
        end = r
        while end + 1 < len(lines) and lines[end + 1].strip() and _indent(lines[end + 1]) > _indent(line):
            end += 1
        entry = [_entry_of(x, prev, new) for x in lines[r:end + 1]]
        out.append((end, 1, [lines[end], *entry]))
        break
    return out


# every completion by name (the location model's ``c_kind_*`` feature)
KINDS = {"store": stored_parameter, "copy": adapted_copy, "member": member_entry}
