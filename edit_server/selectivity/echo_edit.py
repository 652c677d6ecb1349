"""Whether the model's next-edit rewrite echoes the user's recent edits (pure functions).

Most next edits a person makes carry on what they have just been doing: the argument they added to one
call added to the next (``createHttpTestServer({…})`` → ``createHttpTestServer(t, {…})``), the type they
changed in one place changed in another, the trailing comma they put after one argument put after the next.
A rewrite is an **echo** when every token it adds is a token the recent history added and every token it
removes is one the history removed (tokens as the candidate rules split them: words and single other
characters; whitespace does not count), and it changes at least one. The model's rewrites that echo are
gated as their own kind (``edit:echo``, `thresholds.gate_kind`, with its own calibrated threshold); the
others stay ``edit`` — so a model whose free rewrites are not worth showing can still show the ones that
continue the user's own change. No shipped tier has an ``edit:echo`` threshold yet (it takes ``edit``'s): the
echoes measured so far were not right often enough to show (docs/QUALITY.md).

``history`` is the edit history the request carries (`edit_server.core.history.Hunk`: ``path`` and a
unified ``diff``), every file's: a rename in one file echoes in another.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Sequence

from edit_server.selectivity.candidates import HunkLike, diff_body, tokens

ORIGIN = "echo"  # the origin (and gate kind ``edit:echo``) of a model rewrite that echoes the history


def changed_tokens(old: Sequence[str], new: Sequence[str]) -> tuple[set[str], set[str]]:
    """(removed, added) non-whitespace tokens of a token-level diff of ``old`` → ``new``."""
    removed: set[str] = set()
    added: set[str] = set()
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, old, new, autojunk=False).get_opcodes():
        if tag != "equal":
            removed.update(t for t in old[i1:i2] if not t.isspace())
            added.update(t for t in new[j1:j2] if not t.isspace())
    return removed, added


def _sides(diff: str) -> tuple[list[str], list[str]]:
    """The removed and added text of a unified diff, as tokens (each side's lines joined)."""
    body = diff_body(diff)
    return (tokens("\n".join(b for tag, b in body if tag == "-")),
            tokens("\n".join(b for tag, b in body if tag == "+")))


def history_changes(history: Iterable[HunkLike]) -> tuple[set[str], set[str]]:
    """(removed, added) tokens of every hunk of the history, each hunk diffed on its own."""
    removed: set[str] = set()
    added: set[str] = set()
    for h in history:
        r, a = changed_tokens(*_sides(h.diff))
        removed |= r
        added |= a
    return removed, added


def echoes(old: str, new: str, history: Iterable[HunkLike]) -> bool:
    """Whether rewriting ``old`` as ``new`` makes only changes the ``history`` made (see the module's doc)."""
    removed, added = changed_tokens(tokens(old), tokens(new))
    if not removed and not added:
        return False
    h_removed, h_added = history_changes(history)
    return removed <= h_removed and added <= h_added
