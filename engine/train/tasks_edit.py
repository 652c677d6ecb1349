"""Next-edit and no-edit examples, synthesised from code (real histories: `git_sessions`).

Model of an edit session: an original text and a list of *sites* (start, end, replacement) that together
make one coherent change (rename an identifier everywhere, add a parameter and update call sites, edit a
repeated literal, add an import a new line uses, delete a line, finish typing a line). The user has applied
the first k sites in some order (the edit history, rendered by `engine.textdiff.unified_diff`, the server's
renderer); the cursor sits at the end of the last one; the editable region is the lines around the cursor.
Target = the region with every not-yet-applied site inside it applied — or the unchanged region when none
is left (a *no-edit* example: the model must learn to leave code alone).
"""

from __future__ import annotations

import difflib
import keyword
import random
import re
from dataclasses import dataclass

from engine.templates import (
    EDIT_DIFF_CHARS,
    EDIT_HISTORY,
    EditPrompt,
    canvas_target,
    edit_canvas_length,
    render_edit,
)
from engine.textdiff import unified_diff
from engine.tokens import TokenizerLike
from engine.train.tasks import Budget, Example, round_up, window


@dataclass(frozen=True)
class Site:
    start: int
    end: int
    text: str


def apply_sites(text: str, sites: list[Site]) -> str:
    for s in sorted(sites, key=lambda s: (s.start, s.end), reverse=True):
        text = text[: s.start] + s.text + text[s.end:]
    return text


def shift(pos: int, applied: list[Site]) -> int:
    """Map an offset of the original text through the applied (non-overlapping) sites."""
    return pos + sum(len(s.text) - (s.end - s.start) for s in applied if s.end <= pos and s.start < pos
                     or s.start == s.end == pos)


# ---- site generators -----------------------------------------------------------------------
_IDENT = re.compile(r"\b[A-Za-z_][A-Za-z0-9_]{2,}\b")
_SKIP = set(keyword.kwlist) | {"self", "cls", "None", "True", "False", "print", "len", "range", "return",
                               "function", "const", "let", "var", "func", "this", "int", "str", "void"}


def _rename(name: str, rng: random.Random) -> str:
    if "_" in name and rng.random() < 0.5:
        head, *rest = name.split("_")
        return head + "".join(p.title() for p in rest)
    return rng.choice([name + "s", name + "_id", "new_" + name, name + "2", "the_" + name,
                       name[0].upper() + name[1:], name.rstrip("s") + "_value"])


def sites_rename(text: str, rng: random.Random) -> list[Site] | None:
    counts: dict[str, list[re.Match[str]]] = {}
    for m in _IDENT.finditer(text):
        if m.group() not in _SKIP:
            counts.setdefault(m.group(), []).append(m)
    cand = [k for k, v in counts.items() if 2 <= len(v) <= 40]
    if not cand:
        return None
    name = rng.choice(sorted(cand))
    new = _rename(name, rng)
    return [Site(m.start(), m.end(), new) for m in counts[name]]


_LITERAL = re.compile(r"(?<![\w.])(\d+(?:\.\d+)?)(?![\w.])|(\"[^\"\n]{1,40}\"|'[^'\n]{1,40}')")


def sites_literal(text: str, rng: random.Random) -> list[Site] | None:
    counts: dict[str, list[re.Match[str]]] = {}
    for m in _LITERAL.finditer(text):
        counts.setdefault(m.group(), []).append(m)
    cand = [k for k, v in counts.items() if 2 <= len(v) <= 20 and k not in ("0", "1")]
    if not cand:
        return None
    lit = rng.choice(sorted(cand))
    if lit[0] in "\"'":
        body = lit[1:-1]
        new = lit[0] + rng.choice([body.upper(), body + "_v2", body.replace("_", "-"), "new " + body]) + lit[0]
    else:
        new = str(int(float(lit)) * rng.choice((2, 10)) + rng.randint(1, 9))
    return [Site(m.start(), m.end(), new) for m in counts[lit]] if new != lit else None


def _close_paren(text: str, i: int) -> int | None:
    """Index of the ')' matching the '(' at i."""
    depth = 0
    for j in range(i, min(len(text), i + 2000)):
        if text[j] == "(":
            depth += 1
        elif text[j] == ")":
            depth -= 1
            if depth == 0:
                return j
    return None


_DEF = re.compile(r"\b(?:def|function|func|fn)\s+([A-Za-z_]\w*)\s*\(")


def sites_signature(text: str, rng: random.Random) -> list[Site] | None:
    """Add a parameter to a function and the matching argument at its call sites."""
    defs = [m for m in _DEF.finditer(text)
            if len(re.findall(rf"(?<![\w.]){re.escape(m.group(1))}\s*\(", text)) >= 2]
    if not defs:
        return None
    m = rng.choice(defs)
    name = m.group(1)
    param = rng.choice(["timeout", "verbose", "strict", "context", "limit", "options", "retries"])
    sites = []
    for c in re.finditer(rf"(?<![\w.]){re.escape(name)}\s*\(", text):
        close = _close_paren(text, c.end() - 1)
        if close is None:
            return None
        empty = not text[c.end():close].strip()
        is_def = c.start() == m.start(1)
        arg = f"{param}=None" if is_def else param
        site = Site(close, close, arg if empty else f", {arg}")
        sites.insert(0, site) if is_def else sites.append(site)
    return sites  # the definition first, then call sites in document order


_IMPORT = re.compile(r"^(?:import ([\w.]+)|from [\w.]+ import (\w+))[ \t]*$", re.M)


def sites_import(text: str, rng: random.Random) -> tuple[str, list[Site]] | None:
    """Orig = file without an import line and its last use; sites: add the use, then the import."""
    cand = []
    for m in _IMPORT.finditer(text):
        name = (m.group(1) or m.group(2)).split(".")[0]
        uses = [u for u in re.finditer(rf"^.*\b{re.escape(name)}\b.*\n", text[m.end():], re.M)]
        if uses:
            cand.append((m, uses[-1]))
    if not cand:
        return None
    m, use = rng.choice(cand)
    ia, ib = m.start(), m.end() + 1
    ua, ub = m.end() + use.start(), m.end() + use.end()
    orig = text[:ia] + text[ib:ua] + text[ub:]
    ua2 = ua - (ib - ia)
    return orig, [Site(ua2, ua2, text[ua:ub]), Site(ia, ia, text[ia:ib])]


def _line_bounds(text: str, rng: random.Random) -> tuple[int, int] | None:
    starts = [0] + [m.end() for m in re.finditer("\n", text)]
    cand = [(a, e) for a in starts if (e := text.find("\n", a)) > a and len(text[a:e].strip()) > 8]
    return rng.choice(cand) if cand else None


def sites_delete_line(text: str, rng: random.Random) -> list[Site] | None:
    """The user started deleting a line from its end; next: the rest of it, newline included."""
    lb = _line_bounds(text, rng)
    if lb is None:
        return None
    a, e = lb
    p = rng.randint(a + 1, e - 1)
    return [Site(p, e, ""), Site(a, p, ""), Site(e, e + 1, "")]


def sites_finish_line(text: str, rng: random.Random) -> tuple[str, list[Site]] | None:
    """The user is typing a line; next: the rest of it."""
    lb = _line_bounds(text, rng)
    if lb is None:
        return None
    a, e = lb
    indent = a + len(text[a:e]) - len(text[a:e].lstrip())
    if e - indent < 3:
        return None
    p = rng.randint(indent + 1, e - 1)
    orig = text[:indent] + text[e:]
    return orig, [Site(indent, indent, text[indent:p]), Site(indent, indent, text[p:e])]


GENERATORS = ("rename", "literal", "signature", "import", "delete_line", "finish_line")


def synth_sites(text: str, kind: str, rng: random.Random) -> tuple[str, list[Site], list[int]] | None:
    """(orig text, sites, application order) for one edit kind."""
    if kind in ("import", "finish_line"):
        r = sites_import(text, rng) if kind == "import" else sites_finish_line(text, rng)
        return None if r is None else (r[0], r[1], list(range(len(r[1]))))
    fn = {"rename": sites_rename, "literal": sites_literal, "signature": sites_signature,
          "delete_line": sites_delete_line}[kind]
    sites = fn(text, rng)
    if not sites:
        return None
    if kind in ("delete_line", "signature"):
        return text, sites, list(range(len(sites)))
    ordered = sorted(range(len(sites)), key=lambda i: sites[i].start)
    first = rng.randrange(len(ordered))
    return text, sites, ordered[first:] + ordered[:first]


# ---- rendering -----------------------------------------------------------------------------
def _region(text: str, cursor: int, rng: random.Random) -> tuple[int, int]:
    """Whole lines around the cursor: 1-3 before, 1-4 after."""
    a = text.rfind("\n", 0, cursor) + 1
    for _ in range(rng.randint(1, 3)):
        if a == 0:
            break
        a = text.rfind("\n", 0, a - 1) + 1
    b = cursor
    for _ in range(rng.randint(1, 4)):
        nl = text.find("\n", b)
        if nl < 0:
            b = len(text)
            break
        b = nl + 1
    return a, b


def session_example(tok: TokenizerLike, orig: str, sites: list[Site], order: list[int], path: str,
                    rng: random.Random, budget: Budget, kind: str, k: int | None = None,
                    layout: str | None = None) -> Example | None:
    """Apply the first k sites (in ``order``) as history; the target applies what is left in the region."""
    if not sites:
        return None
    k = k if k is not None else rng.randint(1, len(order))
    applied_idx = order[:k]
    states = [orig]
    for j in range(1, k + 1):
        states.append(apply_sites(orig, [sites[i] for i in order[:j]]))
    current = states[-1]
    applied = [sites[i] for i in applied_idx]
    last = sites[applied_idx[-1]]
    cursor = shift(last.start, [sites[i] for i in applied_idx[:-1]]) + len(last.text)
    if kind in ("import", "signature") and k < len(order) and rng.random() < 0.5:
        nxt = shift(sites[order[k]].start, applied)  # the user went to the next site (imports, a call)
        cursor = current.rfind("\n", 0, nxt) + 1
    cursor = min(cursor, len(current))
    ra, rb = _region(current, cursor, rng)
    pending = []
    for i in order[k:]:
        s = sites[i]
        a, b = shift(s.start, applied), shift(s.end, applied)
        if b < ra or a > rb or (a == rb and s.start != s.end):
            continue
        ra, rb = min(ra, a), max(rb, b)
        pending.append(Site(a - ra, b - ra, s.text))
    region = current[ra:rb]
    new_region = apply_sites(region, pending)
    diffs = [unified_diff(path, x, y) for x, y in zip(states[:-1], states[1:], strict=True)]
    history = tuple(d[:EDIT_DIFF_CHARS] for d in diffs[-EDIT_HISTORY:] if d)
    label = kind if pending else f"noedit:{kind}"
    return render_edit_example(tok, current, ra, rb, new_region, cursor - ra, path, history, budget, rng, label,
                               layout)


def changed_positions(region: list[int], new: list[int], canvas: int) -> tuple[int, ...]:
    """Positions of a rewrite's canvas target (``new`` + eom + pads, ``canvas`` long) that a token diff
    against ``region`` does not match: inserted and replaced tokens, and where the region loses tokens, the
    target token just after the cut (the eom when the cut is at the end) — the tokens a next edit is made of.
    Empty for a copy (a no-edit target)."""
    out: set[int] = set()
    for op, _i1, _i2, j1, j2 in difflib.SequenceMatcher(None, region, new, autojunk=False).get_opcodes():
        if op in ("replace", "insert"):
            out.update(range(j1, j2))
        elif op == "delete":
            out.add(j1)
    return tuple(sorted(j for j in out if j < canvas))


def render_edit_example(tok: TokenizerLike, text: str, ra: int, rb: int, new_region: str, cursor: int,
                        path: str, history: tuple[str, ...], budget: Budget, rng: random.Random,
                        kind: str, layout: str | None = None) -> Example | None:
    """``layout``: the edit prompt order (`engine.templates` edit layouts; None: the default)."""
    region = text[ra:rb]
    region_ids, new_ids = tok.encode(region), tok.encode(new_region)
    r_tok, t_tok = len(region_ids), len(new_ids)
    canvas = max(edit_canvas_length(r_tok, block_size=budget.block_size), round_up(t_tok + 1, budget.block_size))
    if canvas > budget.edit_canvas:
        return None
    room = budget.max_len - canvas - r_tok - 24 - len(tok.encode(path))
    room -= sum(len(tok.encode(h)) for h in history)
    if room < 16:
        return None
    n_chars = int(room * budget.chars_per_token)
    for _ in range(6):
        before, after = window(text[:ra], text[rb:], n_chars, rng)
        prompt = EditPrompt(before, region, after, cursor, path=path, history=history,
                            **({"layout": layout} if layout else {}))  # type: ignore[arg-type]
        ids = render_edit(tok, prompt).ids
        if len(ids) + canvas <= budget.max_len:
            return Example(f"edit:{kind}" if not kind.startswith("noedit") else kind, ids,
                           canvas_target(tok, new_region, canvas),
                           {"region": region, "new_region": new_region, "prompt": prompt},
                           changed_positions(region_ids, new_ids, canvas))
        n_chars = int(n_chars * 0.7)
    return None


def make_edit(tok: TokenizerLike, text: str, path: str, rng: random.Random, budget: Budget,
              kind: str | None = None, layout: str | None = None) -> Example | None:
    kind = kind or rng.choice(GENERATORS)
    made = synth_sites(text, kind, rng)
    if made is None:
        return None
    orig, sites, order = made
    ex = None
    for _ in range(3):  # prefer examples with an edit left to make (no-edit ones come anyway)
        ex = session_example(tok, orig, sites, order, path, rng, budget, kind, layout=layout)
        if ex is not None and not ex.kind.startswith("noedit") or rng.random() < 0.3:
            break
    return ex


def make_noedit(tok: TokenizerLike, text: str, path: str, rng: random.Random, budget: Budget,
                layout: str | None = None) -> Example | None:
    """A region of untouched code, cursor anywhere in it, no history: target = the region."""
    if len(text) < 20:
        return None
    cursor = rng.randrange(len(text))
    ra, rb = _region(text, cursor, rng)
    return render_edit_example(tok, text, ra, rb, text[ra:rb], cursor - ra, path, (), budget, rng,
                               "noedit:random", layout)
