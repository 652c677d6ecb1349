"""The "repeat the last edit" next-edit candidate: no model (pure functions).

When the user's last edit of the document was a substitution inside lines — ``old`` → ``new`` on every
line it touched, e.g. a rename, a changed literal or argument — the same substitution at the other
occurrences of ``old`` in the editable region is a likely next edit (real histories often repeat one
change across lines). `candidate` returns that rewritten region, or None.

* the substitution is read from the last hunk of the document's history (a unified diff whose new side is
  the current text): each run of removed lines must be followed by as many added lines, and every such
  line pair must make the same substitution (their common prefix / suffix removed, widened to whole
  words) — anything else (a line added or removed, two different changes) gives no candidate;
* a wrap or extension — ``new`` holds ``old`` as a whole token (``x`` → ``x, y=1``, ``bool`` → ``str | bool``,
  ``foo`` → ``self.foo``) — is local to its place and is not repeated; a replacement is (``Decoder`` →
  ``ContentDecoder`` is one: ``Decoder`` is not a whole token there). These rules were chosen on the training
  repositories' sessions (docs/QUALITY.md), never on the held-out ones;
* a change that is local to its place is not repeated either: one whose lines still hold ``old`` after the
  edit (``relative_url = URL(relative_url)`` → ``relative_url = URL(url)``: an argument changed, nothing was
  renamed), and a changed literal value (``True`` → ``None``, ``1.1`` → ``2.0``: a choice for that flag, not
  for every ``True`` in sight);
* occurrences are matched at token boundaries (``old`` starting / ending with a word character is not
  matched inside a longer word); an edit made in code is not repeated inside line comments (``hash`` →
  ``unsafe_hash`` leaves "the cached hash code" alone), one made in a comment is (`in_comment`);
* only the region changes: text outside ``[start, end)`` is never touched.

Its score for the gate is `SCORE`, a fixed prior (there are no token confidences): above most of the
shipped model's rewrite scores, so `select.pick` prefers it to them, and ``gate.threshold`` above it hides
it like any other suggestion.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Sequence
from dataclasses import dataclass

from edit_server.context import languages
from edit_server.selectivity.candidates import HunkLike, diff_body, tokens
from engine.textdiff import changed_span

SCORE = 0.95  # the candidate's score (`gate.score` of its confidences)
MIN_OLD = 2  # characters of ``old`` (stripped) a substitution needs: one-letter tokens are too common
_WORD = re.compile(r"\w")
_NUMBER = re.compile(r"[-+]?(?:\d[\d_]*\.?[\d_]*|\.\d[\d_]*)(?:[eE][-+]?\d+)?[jJlLuUfF]?|0[xXoObB][\da-fA-F_]+")
VALUE_WORDS = frozenset({"True", "False", "None", "true", "false", "nil", "null", "undefined", "NULL", "nullptr"})


@dataclass(frozen=True)
class Substitution:
    old: str
    new: str


def _is_word(ch: str) -> bool:
    return bool(_WORD.match(ch))


def line_substitution(a: str, b: str) -> Substitution | None:
    """What turns line ``a`` into line ``b``: the differing middle, widened to whole words (None: equal)."""
    if a == b:
        return None
    p, end, _ = changed_span(a, b)
    q = len(a) - end
    while p > 0 and _is_word(a[p - 1]):  # the common prefix ends inside a word: take the whole word
        p -= 1
    while q > 0 and _is_word(a[len(a) - q]):
        q -= 1
    return Substitution(a[p:len(a) - q], b[p:len(b) - q])


def token_substitution(a: str, b: str) -> Substitution | None:
    """The one token replacement that turns line ``a`` into ``b`` wherever they differ, or None: for a line
    that makes the same change twice (``self.limits = limits`` → ``self.pool_limits = pool_limits``), which
    `line_substitution`'s single differing middle cannot express. Insertions and deletions are not
    replacements (None)."""
    ta, tb = tokens(a), tokens(b)
    ops = [op for op in difflib.SequenceMatcher(a=ta, b=tb, autojunk=False).get_opcodes() if op[0] != "equal"]
    subs = {("".join(ta[i1:i2]), "".join(tb[j1:j2])) for tag, i1, i2, j1, j2 in ops if tag == "replace"}
    if len(subs) != 1 or any(tag != "replace" for tag, *_ in ops):
        return None
    (o, n), = subs
    return Substitution(o, n)


def pair_substitutions(a: str, b: str) -> list[Substitution]:
    """The substitutions that could explain line ``a`` → ``b``: the differing middle, and where it is not a
    single token replacement, the one token replacement made at several places."""
    out = [s] if (s := line_substitution(a, b)) is not None else []
    t = token_substitution(a, b)
    if t is not None and t not in out:
        out.append(t)
    return out


def hunk_substitution(diff: str) -> Substitution | None:
    """The one substitution every changed line pair of a unified diff makes, or None."""
    found: list[Substitution] | None = None  # the substitutions every pair so far allows
    rem: list[str] = []
    add: list[str] = []
    written: list[str] = []  # every added line

    def flush() -> bool:
        nonlocal found
        if not rem and not add:
            return True
        if len(rem) != len(add):
            return False
        for a, b in zip(rem, add, strict=True):
            options = pair_substitutions(a, b)
            if found is not None:  # every pair must allow the same substitution
                options = [s for s in options if s in found]
            if not options:
                return False
            found = options
        rem.clear()
        add.clear()
        return True

    for tag, body in diff_body(diff):
        if tag == "@@":
            if not flush():
                return None
            continue
        if tag == "-":
            if add:  # a removal after additions: not a run of pairs
                return None
            rem.append(body)
        elif tag == "+":
            add.append(body)
            written.append(body)
        elif not flush():
            return None
    if not flush() or not found:
        return None
    sub = _repeatable(found[0])
    if sub is not None and any(occurrences(line, sub.old) for line in written):
        return None  # the edit kept ``old`` on a line it wrote: a local change, not a rename
    return sub


def _repeatable(found: Substitution) -> Substitution | None:
    """``found``, unless it is too short to place, a no-op, or a wrap / extension (local to its place)."""
    old = found.old.strip()
    if len(old) < MIN_OLD or old == found.new.strip() or occurrences(found.new, found.old) or is_value(old):
        return None
    return found


def is_value(token: str) -> bool:
    """A literal value (``True``, ``nil``, ``0.01``): changing one is a choice made for its place (a flag, a
    default), not a rename to carry to every other ``True`` in sight."""
    return token in VALUE_WORDS or _NUMBER.fullmatch(token) is not None


def occurrences(text: str, old: str) -> list[int]:
    """Starts of ``old`` in ``text`` at token boundaries."""
    out = []
    i = text.find(old)
    while i >= 0:
        before_ok = not (_is_word(old[0]) and i > 0 and _is_word(text[i - 1]))
        j = i + len(old)
        after_ok = not (_is_word(old[-1]) and j < len(text) and _is_word(text[j]))
        if before_ok and after_ok:
            out.append(i)
        i = text.find(old, i + 1)
    return out


def comment_marker(path: str) -> str | None:
    """The line-comment marker of ``path``'s language, or None (a language without a grammar)."""
    spec = languages.spec_for(path)
    if spec is None:
        return None
    return "#" if spec.name == "python" else "--" if spec.name == "lua" else "//"


def _scan(text: str, i: int, marker: str | None) -> str:
    """What ``text[i]`` lies in on its line: "comment" (after ``marker``), "string" (a one-line string
    literal) or "" (code)."""
    j = text.rfind("\n", 0, i) + 1
    quote = ""
    while j < i:
        ch = text[j]
        if quote:
            if ch == "\\":
                j += 1
            elif ch == quote:
                quote = ""
        elif ch in "\"'`":
            quote = ch
        elif marker and text.startswith(marker, j):
            return "comment"
        j += 1
    return "string" if quote else ""


def in_comment(text: str, i: int, marker: str) -> bool:
    """Whether ``text[i]`` is in a line comment: after ``marker`` on its line, outside one-line strings."""
    return _scan(text, i, marker) == "comment"


def in_string(text: str, i: int) -> bool:
    """Whether ``text[i]`` is inside a one-line string literal."""
    return _scan(text, i, None) == "string"


def apply(text: str, start: int, end: int, sub: Substitution, code_only: str | None = None) -> str | None:
    """``text[start:end]`` with ``sub`` at every occurrence of ``sub.old`` inside it, or None when there is
    none. ``code_only``: a line-comment marker — occurrences in comments are left as they are."""
    if not sub.old:
        return None
    region = text[start:end]
    out, at = [], 0
    for i in occurrences(region, sub.old):
        if i < at or (code_only and in_comment(region, i, code_only)):  # overlapping: the first wins
            continue
        out += [region[at:i], sub.new]
        at = i + len(sub.old)
    if not out:
        return None
    return "".join(out) + region[at:]


def _said_in_comment(diff: str, old: str, marker: str) -> bool:
    """Whether the edit replaced ``old`` inside a comment somewhere (so prose is its subject too)."""
    return any(in_comment(body, i, marker) for tag, body in diff_body(diff) if tag == "-"
               for i in occurrences(body, old))


def candidate(text: str, start: int, end: int, path: str, history: Sequence[HunkLike]) -> str | None:
    """The region ``text[start:end]`` with the last edit of ``path`` repeated in it, or None. An edit made
    in code is repeated in code only: a renamed parameter does not rewrite the comments that mention the
    word."""
    last = next((h for h in reversed(history) if h.path == path), None)
    if last is None:
        return None
    sub = hunk_substitution(last.diff)
    if sub is None:
        return None
    marker = comment_marker(path)
    code_only = marker if marker and not _said_in_comment(last.diff, sub.old, marker) else None
    return apply(text, start, end, sub, code_only)
