"""Started edits made from real files, their second half the truth: what `edit_server.nextedit.complete_edit`
proposes, taken out of code that has it and typed again as a user starts it.

* **a stored parameter**: a function whose body stores a parameter as it stores the one before it
  (``self.timeout = timeout``) loses both; the user adds the parameter back to the signature; the truth
  is the store, where it was;
* **an adapted copy**: two neighbouring lines that differ by one word of their identifiers and strings
  (``nameInput = form.querySelector("#name")`` / ``emailInput = …("#email")``): the second is taken out;
  the user pastes the first again and changes its first such word; the truth is the second line as it
  was.

Each case keeps its source case's repository (``meta.repo``); ``meta.synthetic`` names the kind. The
truths are real code: a completion that puts the store or the word elsewhere than the file had it is
wrong here, so a fit learns how often these proposals are right on code nobody wrote for them.
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from typing import Any

from edit_server.nextedit import complete_edit as completing
from engine.templates import EDIT_REGION_ABOVE, EDIT_REGION_BELOW
from engine.textdiff import line_span, unified_diff

Case = dict[str, Any]
_HEADER = re.compile(r"^\s*(?:(?:pub|export|async|static|public|private)\s+)*(?:def|fn|func|function|constructor)\b"
                     r"|^\s*constructor\s*\(")


def _case(src: Case, kind: str, history: Sequence[str], now: str, cursor: int, truth: str) -> Case | None:
    path = src["path"]
    ra, rb = line_span(now, cursor, EDIT_REGION_ABOVE, EDIT_REGION_BELOW)
    tail = len(now) - rb
    if truth[:ra] != now[:ra] or truth[len(truth) - tail:] != now[rb:]:
        return None  # the truth reaches outside the editable region
    return {"id": f"{src['id']}:{kind}", "kind": "edit", "language": src.get("language", ""), "path": path,
            "files": {path: now}, "cursor": {"path": path, "offset": cursor},
            "expected": [{"path": path, "start": ra, "end": rb, "text": truth[ra:len(truth) - tail]}],
            "history": list(history),
            "meta": {"repo": src["meta"].get("repo", ""), "category": "next-edit", "synthetic": kind,
                     "source": src["id"], "pending": []}}


def _offset(lines: Sequence[str], row: int, col: int) -> int:
    return sum(len(x) + 1 for x in lines[:row]) + col


def stored_parameter(src: Case, rng: random.Random, most: int = 3) -> list[Case]:
    path, text = src["path"], src["files"][src["path"]]
    out: list[Case] = []
    lines = text.split("\n")
    heads = [r for r, line in enumerate(lines) if _HEADER.match(line) and line.count("(") == 1 and ")" in line]
    rng.shuffle(heads)
    for h in heads:
        if len(out) >= most:
            break
        params = completing._params(lines[h]) or []
        body = completing._body(lines, h)
        stores = {q: r for q in params for r in body if completing._store(lines[r], q)}
        names = [q for q in params if q in stores and q not in completing._SELFISH]
        for p in names[1:]:
            prev = params[params.index(p) - 1]
            if prev not in stores or any(re.search(rf"\b{re.escape(p)}\b", lines[r]) for r in body
                                         if r != stores[p]):
                continue
            header = _drop_param(lines[h], p)
            if header is None:
                continue
            started = list(lines)
            del started[stores[p]]
            before = list(started)
            before[h] = header
            now, base = "\n".join(started), "\n".join(before)
            col = lines[h].find(p)
            made = _case(src, "complete-store", [unified_diff(path, base, now)], now,
                         _offset(started, h, col + len(p)), text)
            if made is not None:
                out.append(made)
                break
    return out


def _drop_param(header: str, p: str) -> str | None:
    """``header`` without the parameter ``p`` (and its comma)."""
    m = re.search(rf",\s*{re.escape(p)}\b[^,()]*(?=[,)])", header)
    return header[:m.start()] + header[m.end():] if m else None


def adapted_copy(src: Case, rng: random.Random) -> list[Case]:
    path, text = src["path"], src["files"][src["path"]]
    lines = text.split("\n")
    rows = list(range(len(lines) - 1))
    rng.shuffle(rows)
    for r in rows:
        a, b = lines[r], lines[r + 1]
        wa, wb = completing._WORD.findall(a), completing._WORD.findall(b)
        if not a.strip() or len(wa) != len(wb) or len(wa) < 3:
            continue
        diff = [(x, y) for x, y in zip(wa, wb, strict=True) if x != y]
        if len(diff) < 2:
            continue
        stem = completing._stem(*diff[0])
        if stem is None or completing._restem(a, *stem) != b:
            continue
        # the user pastes line r again below it and changes the first differing word
        first = diff[0]
        i = re.search(rf"\b{re.escape(first[0])}\b", a)
        if i is None:
            continue
        typed = a[:i.start()] + first[1] + a[i.end():]
        if typed == b:
            continue
        base = lines[:r + 1] + lines[r + 2:]
        pasted = lines[:r + 1] + [a] + lines[r + 2:]
        now = lines[:r + 1] + [typed] + lines[r + 2:]
        history = [unified_diff(path, "\n".join(base), "\n".join(pasted)),
                   unified_diff(path, "\n".join(pasted), "\n".join(now))]
        made = _case(src, "complete-copy", history, "\n".join(now),
                     _offset(now, r + 1, i.start() + len(first[1])), text)
        return [made] if made is not None else []
    return []


def member_entry(src: Case, rng: random.Random) -> list[Case]:
    """A member of an enumeration whose listing names it (a switch's case, a map's key) taken out with its
    entry, the member typed again: the truth is the entry where the file had it (after the member before's)."""
    path, text = src["path"], src["files"][src["path"]]
    lines = text.split("\n")
    rows = list(range(len(lines)))
    rng.shuffle(rows)
    for m in rows:
        if not completing._MEMBER.match(lines[m]):
            continue
        block = completing._siblings(lines, m)
        names = [completing._first_word(lines[r]) for r in block]
        at = block.index(m)
        if at < 2 or len(set(names)) != len(names) or not all(x[:1].isupper() for x in names):
            continue
        new, prev = names[at], names[at - 1]
        for r, line in enumerate(lines):
            if r in block or r == 0 or not completing._has(line, new) or \
                    completing._entry_of(line, new, prev) not in lines[max(0, r - completing.LISTING_GAP):r]:
                continue
            end = r
            while end + 1 < len(lines) and lines[end + 1].strip() and \
                    completing._indent(lines[end + 1]) > completing._indent(line):
                end += 1
            now = lines[:r] + lines[end + 1:]
            m_now = m if m < r else m - (end + 1 - r)
            base = now[:m_now] + now[m_now + 1:]
            if sum(completing._has(x, new) for x in now) != 1:
                break  # the member is used elsewhere too: not a listing's only mention
            anchor = r - 1 if m > r else r - 1
            a = _offset(now, anchor, 0)
            b = a + len(now[anchor])
            pending = [{"start": a, "end": b, "text": "\n".join([now[anchor], *lines[r:end + 1]])}]
            now_text = "\n".join(now)
            cursor = _offset(now, m_now, len(now[m_now]))
            ra, rb = line_span(now_text, cursor, EDIT_REGION_ABOVE, EDIT_REGION_BELOW)
            if a < rb and b > ra:
                break  # inside the region: the jump cases are what this teaches
            return [{"id": f"{src['id']}:complete-member", "kind": "edit", "language": src.get("language", ""),
                     "path": path, "files": {path: now_text}, "cursor": {"path": path, "offset": cursor},
                     "expected": None, "history": [unified_diff(path, "\n".join(base), now_text)],
                     "meta": {"repo": src["meta"].get("repo", ""), "category": "elsewhere",
                              "synthetic": "complete-member", "source": src["id"], "pending": pending}}]
    return []


def synthesize(cases: Sequence[Case], n: int, seed: int = 0) -> list[Case]:
    """Up to ``n`` started edits from ``cases``' files (a file at most once; kinds in turn)."""
    rng = random.Random(seed)
    order = [c for c in cases if not c["meta"].get("synthetic")]
    rng.shuffle(order)
    seen: set[tuple[str, str]] = set()
    out: list[Case] = []
    makers = [stored_parameter, adapted_copy, member_entry]
    for c in order:
        if len(out) >= n:
            break
        key = (str(c["meta"].get("repo", "")), c["path"])
        if key in seen:
            continue
        seen.add(key)
        for make in makers:
            out.extend(make(c, rng)[: n - len(out)])
    return out
