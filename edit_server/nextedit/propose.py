"""A next edit's candidate places and rewrites, each with the features the location model scores (pure
functions, no model).

`propose` turns the recent edits into `Proposal`s:

* **carry in the region**: a change of the recent hunks (`carry.changes`; one alone, or every change of
  its hunk together) made on every line of the editable region that still holds its old text;
* **carry elsewhere** (a jump): the nearest such line outside the region — below the cursor first, as
  one reads — rewritten alone;
* **the rules'** region candidates (the repeated edit, the finished move, the superseded import, the
  look-alike lines: `edit_server.nextedit.rules.RULES`), passed in, scored on the same scale.

`features` describes a proposal as the numbers `locator.Locator` was trained on (names in `FEATURES`); the
location model's probability that the proposal is the user's next edit, exactly, is the one scale every
candidate is shown or hidden on.
"""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from edit_server.context import languages
from edit_server.nextedit import analog_edit, complete_edit
from edit_server.nextedit import bindings as binding
from edit_server.nextedit import carry as carrying
from edit_server.nextedit.carry import Change
from edit_server.selectivity.candidates import HunkLike

ORIGIN = "carry"  # the carried edit's origin (gate kind ``edit:carry``)
COMPLETE = "complete"  # a started edit's second half (`complete_edit`; gate kind ``edit:complete``)
RULE_ORIGINS = ("repeat", "analog", "move", "import")
ORIGINS = (ORIGIN, COMPLETE, *RULE_ORIGINS)  # every proposal's origin
LANGS = ("python", "typescript", "javascript", "go", "rust", "cpp")
JUMP_LINES = 400  # a carried edit further than this from the cursor is not offered


@dataclass(frozen=True)
class Proposal:
    """A rewrite of ``text[start:end]`` as ``new`` (whole lines), who proposed it and its features."""

    start: int
    end: int
    new: str
    origin: str
    jump: bool = False  # outside the editable region: offered as a jump target
    feats: dict[str, float] = field(default_factory=dict, compare=False)


_BASE = (
    "bias", "o_carry", "o_complete", "o_repeat", "o_analog", "o_move", "o_import", "jump", "joint",
    "age", "age0", "same_file", "pairs", "consistency", "hunk_changes", "clean", "old_ident", "new_ident",
    "old_len", "extends", "shrinks", "value", "declares", "comment_change", "rows", "rows_doc", "new_in_doc",
    "old_left_doc", "dist", "cursor_row", "likeness", "in_string", "region_lines_changed",
    "times", "history", "cursor_blank", "last_size", "left_match", "right_match", "camel", "new_before",
    "new_fresh", "same_scope", "other_scope", "bound_decl", "bound_use", "follows", "strays", "pattern",
    "kind_store", "kind_copy", "kind_member",
    *(f"lang_{x}" for x in LANGS),
)
# a jump's features are kept apart (``j_`` + name): a place outside the region is right for other reasons
# than a rewrite of it, and one logistic regression over both halves is two models on one scale
# and so are a rename's places that its binding names (``b_``): where the tree says the old name now refers
# to nothing, the text's cues (how far, how alike) matter less
# and a started edit's completion (``c_``) is judged by its own cues
HALVES = ("", "j_", "b_", "c_")
FEATURES = tuple(f"{h}{x}" for h in HALVES for x in _BASE)


def _rows(text: str) -> list[int]:
    """The offset each row of ``text`` starts at, and the text's end."""
    out = [0]
    for i, ch in enumerate(text):
        if ch == "\n":
            out.append(i + 1)
    out.append(len(text) + 1)
    return out


def _lang(path: str) -> str:
    spec = languages.spec_for(path)
    name = spec.name if spec else ""
    return {"tsx": "typescript", "c": "cpp"}.get(name, name)


def _in_string(line: str, old: str) -> bool:
    i = line.find(old)
    return i >= 0 and any(line[:i].count(q) % 2 for q in "\"'`")


def _occ(text: str, s: str) -> list[int]:
    return carrying.occurrences(text, s) if s else []


def _change_feats(c: Change, path: str, text: str) -> dict[str, float]:
    return {
        "age": float(c.age), "age0": float(c.age == 0), "same_file": float(c.path == path),
        "pairs": math.log1p(c.pairs), "consistency": c.pairs / max(1, c.hunk_pairs),
        "hunk_changes": math.log1p(c.hunk_changes), "clean": float(c.clean),
        "old_ident": float(bool(carrying._IDENT.fullmatch(c.old))),
        "new_ident": float(bool(carrying._IDENT.fullmatch(c.new))), "old_len": math.log1p(len(c.old)),
        "extends": float(bool(_occ(c.new, c.old))),
        "shrinks": float(bool(_occ(c.old, c.new))), "value": float(carrying.value_change(c)),
        "declares": float(carrying.declares(c.source, c.old)), "comment_change": float(c.in_comment),
        "new_in_doc": math.log1p(len(_occ(text, c.new))),
        "old_left_doc": math.log1p(len(_occ(text, c.old))),
    }


@dataclass(frozen=True)
class Setting:
    """What every proposal of one request shares: the history's size and shape around the cursor."""

    history: int  # hunks of the document's recent history
    last_size: int  # lines the newest hunk removed and added
    cursor_blank: bool
    times: dict[tuple[str, str], int]  # hunks that made each change
    pattern: int = 0  # earlier hunks of the document the newest one's change reproduces (a pattern repeated)


def setting(text: str, cursor: int, path: str, history: Sequence[HunkLike]) -> Setting:
    ls = text.rfind("\n", 0, cursor) + 1
    le = text.find("\n", cursor)
    mine = [h for h in history if h.path == path]
    last = mine[-1].diff if mine else ""
    size = sum(1 for ln in last.splitlines() if ln[:1] in "+-" and not ln.startswith(("+++", "---")))
    times: dict[tuple[str, str], int] = {}
    for h in list(reversed(history))[:carrying.MAX_HUNKS]:
        for c in carrying.changes([h]):
            times[c.key] = times.get(c.key, 0) + 1
    return Setting(len(mine), size, not text[ls:len(text) if le < 0 else le].strip(), times, repeats(mine))


def repeats(mine: Sequence[HunkLike]) -> int:
    """How many of the document's earlier recent hunks the newest one's line change, carried over token by
    token (`analog_edit.transfer`), makes again: the user is applying one pattern line after line
    (``errors.New(fmt.Sprintf(…))`` → ``fmt.Errorf(…)`` with another message each time)."""
    recent = list(reversed(mine))[:carrying.MAX_HUNKS]
    if len(recent) < 2:
        return 0
    last = analog_edit.changed_pairs(recent[0].diff)[:analog_edit.MAX_PAIRS]
    n = 0
    for h in recent[1:]:
        pairs = analog_edit.changed_pairs(h.diff)[:analog_edit.MAX_PAIRS]
        if any((analog_edit.transfer(a0, b0, a) or "").strip() == b.strip() for a0, b0 in last for a, b in pairs):
            n += 1
    return n


_SCOPE = re.compile(r"^\s*(?:(?:pub(?:\([\w:]+\))?|export|async|static|public|private|protected)\s+)*"
                    r"(?:def|fn|func|function|class|impl|struct|interface)\b")


def scope_of(lines: Sequence[str], row: int) -> int | None:
    """The row of the innermost function / class header above ``row`` at a smaller indent (None: top level)."""
    if not 0 <= row < len(lines):
        return None
    line = lines[row]
    indent = len(line) - len(line.lstrip()) if line.strip() else 10**6
    for r in range(row - 1 if _SCOPE.match(line) else row, -1, -1):
        cand = lines[r]
        if cand.strip() and len(cand) - len(cand.lstrip()) < indent and _SCOPE.match(cand):
            return r
        if cand.strip():
            indent = min(indent, len(cand) - len(cand.lstrip()) + (0 if _SCOPE.match(cand) else 1))
    return None


def _around(line: str, old: str) -> tuple[str, str]:
    """The characters just before and after ``old``'s first occurrence in ``line`` (spaces skipped)."""
    i = line.find(old)
    if i < 0:
        return "", ""
    return line[:i].rstrip()[-1:], line[i + len(old):].lstrip()[:1]


def features(p: Proposal, text: str, path: str, cursor: int, changes: Sequence[Change] = (),
             changed_rows: Sequence[int] = (), rows_doc: int = 0, ctx: Setting | None = None,
             skip: set[int] | None = None, follow: dict[tuple[str, str], Followed] | None = None
             ) -> dict[str, float]:
    """The proposal as the location model's inputs (`FEATURES`; absent ones are 0)."""
    cur_row = text.count("\n", 0, cursor)
    f: dict[str, float] = {"bias": 1.0, f"o_{p.origin}": 1.0, "jump": float(p.jump), f"lang_{_lang(path)}": 1.0}
    if ctx is not None:
        f.update({"history": math.log1p(ctx.history), "last_size": math.log1p(ctx.last_size),
                  "cursor_blank": float(ctx.cursor_blank), "pattern": math.log1p(ctx.pattern)})
        if changes:
            f["times"] = math.log1p(max(ctx.times.get(c.key, 1) for c in changes))
    if changes:
        f.update(_change_feats(changes[0], path, text))
        f["joint"] = float(len(changes) > 1)
        f["age"] = float(min(c.age for c in changes))
    rows = list(changed_rows) or _changed_rows(text, p)
    # no feature says above or below the cursor: the training sessions are replayed top to bottom (every next
    # hunk lies below), so one would learn the replay's order, not the user's
    if rows:
        d = min(rows, key=lambda r: abs(r - cur_row))
        f["dist"] = math.log1p(abs(d - cur_row))
        f["cursor_row"] = float(cur_row in rows)
    f["rows"] = math.log1p(len(rows))
    f["rows_doc"] = math.log1p(rows_doc)
    f["region_lines_changed"] = math.log1p(len(rows))
    if changes and rows:
        lines = text.split("\n")
        c = changes[0]
        f["likeness"] = max(difflib.SequenceMatcher(None, c.source.strip(), lines[r].strip(), autojunk=False).ratio()
                            for r in rows if r < len(lines))
        f["in_string"] = float(any(_in_string(lines[r], c.old) for r in rows if r < len(lines)))
        left, right = _around(c.source, c.old)
        near = [_around(lines[r], c.old) for r in rows if r < len(lines)]
        f["left_match"] = sum(x[0] == left for x in near) / max(1, len(near))
        f["right_match"] = sum(x[1] == right for x in near) / max(1, len(near))
        f["camel"] = float(c.old[:1].isupper())
        written = "\n".join(lines[r] for r in (skip or ()) if r < len(lines))
        before = max(0, len(_occ(text, c.new)) - len(_occ(written, c.new)))
        f["new_before"] = math.log1p(before)
        # a name the edit wrote that nothing else in the file has: a rename under way, its declaration or other
        # uses still to follow
        f["new_fresh"] = float(before == 0 and bool(carrying._IDENT.fullmatch(c.new)))
        home = scope_of(lines, cur_row)
        f["same_scope"] = float(all(scope_of(lines, r) == home for r in rows))
        f["other_scope"] = float(home is not None and any(scope_of(lines, r) not in (home, None) for r in rows))
    known = [k for c in changes if (k := (follow or {}).get(c.key)) is not None]
    if known and rows:
        allowed = set().union(*(k.rows for k in known))
        f["bound_decl"] = float(any(k.kind == "binding" for k in known))
        f["bound_use"] = float(any(k.kind == "use" for k in known))
        f["follows"] = float(all(r in allowed for r in rows))
        f["strays"] = float(any(r not in allowed for r in rows))
    if p.origin == COMPLETE:
        return {f"c_{k}": v for k, v in f.items() if k in _BASE}
    if p.jump:
        return {f"j_{k}": v for k, v in f.items() if k in _BASE}
    if known:
        return {f"b_{k}": v for k, v in f.items() if k in _BASE}
    return {k: v for k, v in f.items() if k in _BASE}


@dataclass(frozen=True)
class Followed:
    """Where a rename's binding says it goes: ``binding`` (the declaration was renamed: the uses that still
    say the old name and now refer to nothing) or ``use`` (a use was renamed to a name nothing binds: the
    old name's declaration it referred to and that declaration's other uses) — each place's row and the
    columns of the name on it (code only: a template's ``${port}`` is code, a string's word is not)."""

    kind: str
    cols: dict[int, tuple[int, ...]]
    shorthands: frozenset[tuple[int, int]] = frozenset()  # places that also name a field: the field stays

    @property
    def rows(self) -> frozenset[int]:
        return frozenset(self.cols)

    def name_at(self, row: int, col: int, old: str, new: str) -> str:
        """What ``old`` at ``row``, ``col`` becomes: ``new``, or ``old: new`` where it also names a field."""
        return f"{old}: {new}" if (row, col) in self.shorthands else new


def _grouped(places: set[tuple[int, int]], skip: set[int]) -> dict[int, tuple[int, ...]]:
    out: dict[int, list[int]] = {}
    for r, c in sorted(places):
        if r not in skip:
            out.setdefault(r, []).append(c)
    return {r: tuple(cs) for r, cs in out.items()}


def follow(text: str, path: str, change: Change, skip: set[int]) -> Followed | None:
    """The places a renamed name's binding names in ``text`` (None: not a rename of a bound name here, or no
    grammar for the file)."""
    if change.path != path or not (carrying._IDENT.fullmatch(change.old) and carrying._IDENT.fullmatch(change.new)):
        return None
    binds = binding.of(text, path)
    if binds is None:
        return None
    old, new = change.old, change.new
    edited = [(b.row, b.col, b) for b in binds.sites(new) if b.row in skip]
    if edited:  # the declaration was renamed
        renamed = {b for _, _, b in edited}
        places = {(r, c) for r, c in binds.refs(old) if not binds.visible(old, r, c)
                  and renamed & set(binds.visible(new, r, c))}
        return Followed("binding", _grouped(places, skip), binds.shorthands & places)
    uses = [(r, c) for r, c in binds.refs(new) if r in skip]
    if not uses or any(binds.visible(new, r, c) for r, c in uses):
        return None
    referred = {b for r, c in uses for b in binds.visible(old, r, c)}
    if not referred:
        return None
    places = {(b.row, b.col) for b in referred} | {
        (r, c) for r, c in binds.refs(old) if referred & set(binds.visible(old, r, c))}
    return Followed("use", _grouped(places, skip), binds.shorthands & places)


def _changed_rows(text: str, p: Proposal) -> list[int]:
    """The document rows a region rewrite changes."""
    base = text.count("\n", 0, p.start)
    a = text[p.start:p.end].split("\n")
    b = p.new.split("\n")
    return [base + i for tag, i1, i2, _, _ in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes()
            if tag != "equal" for i in range(i1, max(i2, i1 + 1))]


def _groups(chs: Sequence[Change]) -> list[list[Change]]:
    """Each change alone, and the changes of one hunk together where it made several."""
    out = [[c] for c in chs]
    by_hunk: dict[tuple[str, int], list[Change]] = {}
    for c in chs:
        by_hunk.setdefault((c.path, c.age), []).append(c)
    out += [g for g in by_hunk.values() if len(g) > 1]
    return out


def propose(text: str, path: str, cursor: int, start: int, end: int, history: Sequence[HunkLike],
            rules: Sequence[tuple[str, str]] = (), jumps: bool = True, region: bool = True) -> list[Proposal]:
    """Every candidate for the next edit of ``text`` (the region ``[start, end)`` around ``cursor``):
    the carried edits in the region (without ``region``: none — a document the cursor is not in) and, with
    ``jumps``, each change's nearest place outside it; the rules' region rewrites ``rules`` ((origin, new
    region)). Each with its features."""
    chs = carrying.changes(history)
    skip = carrying.written_rows(history, path)
    starts = _rows(text)
    lines = text.split("\n")
    r0 = text.count("\n", 0, start)
    r1 = text.count("\n", 0, end) + (0 if end == len(text) or text[end - 1:end] == "\n" else 1)
    cur_row = text.count("\n", 0, cursor)
    out: list[Proposal] = []
    seen: set[tuple[int, int, str]] = set()
    ctx = setting(text, cursor, path, history)
    followed = {c.key: k for c in chs if (k := follow(text, path, c, skip)) is not None}
    # a one-letter name is carried only where its binding leads
    chs = [c for c in chs if len(c.old.strip()) >= carrying.MIN_OLD or c.key in followed]

    binds = binding.of(text, path)

    def labels(r: int) -> frozenset[int]:
        return binds.labels(r) if binds is not None else frozenset()

    def rewrite(r: int, group: Sequence[Change]) -> str:
        """Row ``r`` with the group's changes made: a followed rename at the columns its binding names (none
        elsewhere), the others wherever their old text is."""
        line = lines[r]
        renames = sorted(((c, ch, k) for ch in group if (k := followed.get(ch.key)) is not None
                          for c in k.cols.get(r, ())), key=lambda x: -x[0])
        for c, ch, k in renames:  # right to left: each column still where the line had it
            if line[c:c + len(ch.old)] == ch.old:
                line = carrying.replace_at(line, c, ch.old, k.name_at(r, c, ch.old, ch.new))
        rest = [ch for ch in group if ch.key not in followed]
        return carrying.carry(line, rest, path, frozenset() if renames else labels(r)) if rest else line

    def places(c: Change) -> list[int]:
        k = followed.get(c.key)
        return sorted(k.rows) if k is not None else carrying.targets(text, c, path, skip)

    def add(p: Proposal, group: Sequence[Change], rows: Sequence[int], rows_doc: int) -> None:
        if (p.start, p.end, p.new) in seen or text[p.start:p.end] == p.new:
            return
        seen.add((p.start, p.end, p.new))
        out.append(Proposal(p.start, p.end, p.new, p.origin, p.jump,
                            features(p, text, path, cursor, group, rows, rows_doc, ctx, skip,
                                     None if p.origin == COMPLETE else followed)))

    region_rows = range(r0, max(r0 + 1, r1)) if region else range(0)
    # a rule's rewrite that a carried change also makes is described by that change (its features); the
    # rule's own origin is kept: the rules come first
    carried: dict[str, tuple[list[Change], list[int], int]] = {}
    for group in _groups(chs):
        rows = sorted(set().union(*(places(c) for c in group)))
        inside = [r for r in rows if r in region_rows]
        if inside:
            new_lines = lines[r0:r1]
            for r in inside:
                new_lines[r - r0] = rewrite(r, group)
            carried.setdefault("\n".join(new_lines) + ("\n" if text[start:end].endswith("\n") else ""),
                               (group, inside, len(rows)))
    # a rule's rewrite no carried change makes is described by the newest hunk's changes (its rows its own)
    newest = [c for c in chs if c.age == 0 and c.path == path][:1]
    for origin, new in rules:
        add(Proposal(start, end, new, origin), *carried.get(new, (newest, (), 0)))
    for group in _groups(chs):
        rows = sorted(set().union(*(places(c) for c in group)))
        if not rows:
            continue
        inside = [r for r in rows if r in region_rows]
        if inside:
            new_lines = lines[r0:r1]
            for r in inside:
                new_lines[r - r0] = rewrite(r, group)
            tail = "\n" if text[start:end].endswith("\n") else ""
            add(Proposal(start, end, "\n".join(new_lines) + tail, ORIGIN), group, inside, len(rows))
        outside = [r for r in rows if r not in region_rows and abs(r - cur_row) <= JUMP_LINES]
        if jumps and outside:
            # in another document (no region) its first place from the top
            below = [r for r in outside if r > cur_row or not region]
            r = min(below) if below else max(outside)
            a, b = starts[r], starts[r] + len(lines[r])
            add(Proposal(a, b, rewrite(r, group), ORIGIN, True), group, [r], len(rows))
    if region:
        done = [(kind, w) for kind, make in complete_edit.KINDS.items() for w in make(text, path, history)]
        for kind, (row, n, written) in done:
            before = len(out)
            if row in region_rows and row + n <= r1:
                new_lines = lines[r0:r1]
                new_lines[row - r0:row - r0 + n] = written
                tail = "\n" if text[start:end].endswith("\n") else ""
                add(Proposal(start, end, "\n".join(new_lines) + tail, COMPLETE), newest, [], 1)
            elif jumps and abs(row - cur_row) <= JUMP_LINES:
                a, b = starts[row], starts[row + n - 1] + len(lines[row + n - 1])
                add(Proposal(a, b, "\n".join(written), COMPLETE, True), newest, [row], 1)
            if len(out) > before:  # which completion it is: each is right for its own reasons
                out[-1].feats[f"c_kind_{kind}"] = 1.0
    return out

