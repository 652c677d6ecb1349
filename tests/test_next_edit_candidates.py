"""Several next-edit candidates (issue 25, item 5): sampled alternatives from the engine (tiny random model),
the repeated last edit (no model), and the one selection stage picking the best of them or none."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Any

import pytest

from edit_server.core.history import Hunk
from edit_server.core.messages import Job, Outcome
from edit_server.core.requests import EditBuilt, EditRequest
from edit_server.core.settings import Gate, NextEdit, Settings
from edit_server.nextedit import import_edit, move_edit, repeat_edit
from edit_server.nextedit.rules import rule_candidate
from edit_server.selectivity import candidates
from edit_server.selectivity.select import Candidate, edit_result, edit_results, rewrite_hidden
from edit_server.serving.worker import alternatives_wanted
from engine.api import RewriteCall
from engine.templates import EditPrompt
from engine.textdiff import unified_diff
from engine.types import EngineInfo, GenerateResult


def _hunk(old: str, new: str, path: str = "m.py") -> Hunk:
    return Hunk(path, unified_diff(path, old, new), 0.0, False)


def _req(before: str, now: str, cur: int, path: str = "m.py") -> tuple[EditRequest, EditBuilt]:
    req = EditRequest(f"file:///w/{path}", path, now, 2, cur, [_hunk(before, now, path)])
    return req, EditBuilt(EditPrompt("", now, "", cur, path=path), 0, len(now))


# -- the repeated last edit ----------------------------------------------------------------------------

BEFORE = "def f(count):\n    total = count + 1\n    print(count)\n    return count * 2\n"
RENAMED = BEFORE.replace("def f(count)", "def f(n)")


def test_rename_is_repeated_at_the_other_occurrences() -> None:
    req, built = _req(BEFORE, RENAMED, RENAMED.index("(n)") + 2)
    sub = repeat_edit.hunk_substitution(req.history[-1].diff)
    assert sub == repeat_edit.Substitution("count", "n")
    cand = rule_candidate("repeat", req, built)
    assert cand is not None and cand.origin == "repeat" and cand.confidences == [repeat_edit.SCORE]
    assert cand.new == "def f(n):\n    total = n + 1\n    print(n)\n    return n * 2\n"


def test_substitution_widens_to_whole_words_and_respects_token_boundaries() -> None:
    assert repeat_edit.line_substitution("foo(bar)", "foo(baz)") == repeat_edit.Substitution("bar", "baz")
    assert repeat_edit.line_substitution("x = 1", "x = 10") == repeat_edit.Substitution("1", "10")
    text = "x = bar\ny = bars + bar_1 + foo.bar\n"
    sub = repeat_edit.Substitution("bar", "baz")
    assert repeat_edit.apply(text, 0, len(text), sub) == "x = baz\ny = bars + bar_1 + foo.baz\n"


def test_no_candidate_when_the_old_text_no_longer_occurs() -> None:
    before = "a = old_value\nb = 2\n"
    now = "a = new_value\nb = 2\n"
    req, built = _req(before, now, now.index("b"))
    assert repeat_edit.hunk_substitution(req.history[-1].diff) == repeat_edit.Substitution("old_value", "new_value")
    assert rule_candidate("repeat", req, built) is None


def test_never_touches_text_outside_the_region() -> None:
    now = "x = count\n" + RENAMED + "y = count\n"
    before = "x = count\n" + BEFORE + "y = count\n"
    start, end = len("x = count\n"), len("x = count\n") + len(RENAMED)
    req = EditRequest("file:///w/m.py", "m.py", now, 2, start + 8, [_hunk(before, now)])
    built = EditBuilt(EditPrompt(now[:start], now[start:end], now[end:], 8, path="m.py"), start, end)
    cand = rule_candidate("repeat", req, built)
    assert cand is not None
    assert cand.new == "def f(n):\n    total = n + 1\n    print(n)\n    return n * 2\n"
    assert "count" not in cand.new  # the region only: the caller's edits span [start, end)
    _, sug, edits = edit_results(req, built, [cand], Settings())
    assert sug is not None and edits and all(start <= e.start and e.end <= end for e in edits)


def test_no_substitution_from_insertions_mixed_changes_or_whitespace() -> None:
    added = repeat_edit.hunk_substitution(unified_diff("m.py", "a = 1\n", "a = 1\nb = 2\n"))
    two = repeat_edit.hunk_substitution(unified_diff("m.py", "x = foo\ny = bar\n", "x = foo2\ny = bar2\n"))
    indent = repeat_edit.hunk_substitution(unified_diff("m.py", "x = 1\n", "    x = 1\n"))
    short = repeat_edit.hunk_substitution(unified_diff("m.py", "f(a)\n", "f(b)\n"))
    assert (added, two, indent, short) == (None, None, None, None)
    # the same change on two lines is one substitution
    same = repeat_edit.hunk_substitution(unified_diff("m.py", "f(old)\ng(old)\n", "f(new)\ng(new)\n"))
    assert same == repeat_edit.Substitution("old", "new")


def test_a_wrap_or_extension_is_not_repeated_a_replacement_is() -> None:
    def sub(a: str, b: str) -> repeat_edit.Substitution | None:
        return repeat_edit.hunk_substitution(unified_diff("m.py", a, b))

    assert sub("f(x, foo)\n", "f(x, self.foo)\n") is None  # foo is a whole token of self.foo
    assert sub("def f(a: bool):\n", "def f(a: str | bool):\n") is None
    assert sub("g(done)\n", "g(done, later=1)\n") is None
    assert sub("d = Decoder()\n", "d = ContentDecoder()\n") == repeat_edit.Substitution("Decoder", "ContentDecoder")
    text = "x = Decoder()\ny = ContentDecoder()\n"  # the occurrence inside a longer word stays
    assert repeat_edit.apply(text, 0, len(text), repeat_edit.Substitution("Decoder", "ContentDecoder")) == \
        "x = ContentDecoder()\ny = ContentDecoder()\n"


def test_a_token_replaced_at_several_places_of_a_line_is_one_substitution() -> None:
    def sub(a: str, b: str) -> repeat_edit.Substitution | None:
        return repeat_edit.hunk_substitution(unified_diff("m.py", a, b))

    renamed = sub("def __init__(self, limits: Limits):\n    self.limits = limits\n",
                  "def __init__(self, pool_limits: Limits):\n    self.pool_limits = pool_limits\n")
    assert renamed == repeat_edit.Substitution("limits", "pool_limits")
    text = "    self.pool_limits = pool_limits\n\ndef size(self):\n    return self.limits.hard + limits_other\n"
    assert repeat_edit.apply(text, 0, len(text), renamed) == text.replace("self.limits", "self.pool_limits")
    assert repeat_edit.token_substitution("a = limits(limits)", "a = lim(limits)") == repeat_edit.Substitution("limits", "lim")
    assert repeat_edit.token_substitution("x = a + a", "x = b + c") is None  # two different replacements
    assert repeat_edit.token_substitution("f(a, a)", "f(a, a, b)") is None  # an insertion, not a replacement
    assert sub("x = old + old\ny = other\n", "x = new + new\ny = changed\n") is None  # pairs disagree



def test_a_change_that_kept_the_old_word_or_changed_a_value_is_local() -> None:
    def sub(a: str, b: str) -> repeat_edit.Substitution | None:
        return repeat_edit.hunk_substitution(unified_diff("m.py", a, b))

    # the line the edit wrote still uses ``relative_url``: the argument changed, nothing was renamed
    assert sub("relative_url = URL(relative_url)\n", "relative_url = URL(url)\n") is None
    assert sub("exc.request = request\n", "exc._request = request\n") is None  # ``request`` kept
    # a literal value is a choice for its place, not a rename
    for a, b in (("f(eq=True)\n", "f(eq=None)\n"), ("v = '1.1'\n", "v = '2.0'\n"), ("n = 10\n", "n = 20\n"),
                 ("x := nil\n", "x := y\n")):
        assert sub(a, b) is None, a
    assert sub("f(hash=True)\n", "f(unsafe_hash=True)\n") == repeat_edit.Substitution("hash", "unsafe_hash")


def test_an_edit_made_in_code_is_not_repeated_in_comments() -> None:
    before = "# the hash code is cached\nA = make(hash=True)\nB = make(hash=False)  # no hash\n"
    now = before.replace("A = make(hash=True)", "A = make(unsafe_hash=True)")
    req, built = _req(before, now, now.index("B"))
    cand = rule_candidate("repeat", req, built)
    assert cand is not None
    assert cand.new == "# the hash code is cached\nA = make(unsafe_hash=True)\nB = make(unsafe_hash=False)  # no hash\n"
    # a "#" inside a string does not start a comment
    assert not repeat_edit.in_comment('x = "#hash"', 4, "#") and repeat_edit.in_comment("x = 1  # hash", 9, "#")
    # an edit made in a comment is repeated in comments too
    doc0 = "// initalizePath sets it\nfunc initalizePath() {}\n// see initalizePath\n"
    doc1 = doc0.replace("// initalizePath sets", "// initializePath sets")
    req, built = _req(doc0, doc1, doc1.index("func"), path="m.go")
    cand = rule_candidate("repeat", req, built)
    assert cand is not None and cand.new == doc0.replace("initalizePath", "initializePath")
    # a language without a grammar: no comment syntax known, every occurrence
    assert repeat_edit.comment_marker("notes.txt") is None and repeat_edit.comment_marker("a.lua") == "--"

# -- the finished move ------------------------------------------------------------------------------------

IMPORTS = "import os\nimport sys\n\nfrom warnings import warn\nfrom x import y\n"
PASTED = "from warnings import warn\nimport os\nimport sys\n\nfrom warnings import warn\nfrom x import y\n"


def test_the_other_copy_of_a_pasted_line_is_deleted() -> None:
    req, built = _req(IMPORTS, PASTED, len("from warnings import warn"))
    cand = rule_candidate("move", req, built)
    assert cand is not None and cand.origin == "move" and cand.confidences == [move_edit.SCORE]
    assert cand.new == "from warnings import warn\nimport os\nimport sys\n\nfrom x import y\n"
    # the filter keeps it: it deletes the other copy, not the line just pasted (that would be an undo)
    i, sug, edits = edit_results(req, built, [cand], Settings())
    assert i == 0 and sug is not None and sug.show and sug.origin == "move"
    assert [(e.start, e.end, e.text) for e in edits] == [(PASTED.index("\nfrom warnings") + 1,
                                                          PASTED.index("from x"), "")]
    undo = Candidate(IMPORTS, [0.99])  # the pasted line taken back out
    assert edit_results(req, built, [undo], Settings()) == (-1, None, [])


def test_no_move_without_exactly_one_other_copy_or_from_other_edits() -> None:
    two = PASTED + "from warnings import warn\n"
    req, built = _req(IMPORTS + "from warnings import warn\n", two, 5)
    assert rule_candidate("move", req, built) is None  # two other copies: which one?
    none = "import os\nimport re\n"
    req, built = _req("import os\n", none, len(none) - 1)
    assert rule_candidate("move", req, built) is None  # nothing to delete
    short = "x\ny = 1\n}\n}\n"
    req, built = _req("x\ny = 1\n}\n", short, 2)
    assert rule_candidate("move", req, built) is None  # "}" is too common to be a move
    replaced = "from warnings import warn\nimport sys\n\nfrom warnings import warn\nfrom x import y\n"
    req, built = _req(IMPORTS, replaced, 3)
    assert rule_candidate("move", req, built) is None  # a line was replaced, not pasted
    three = "a = f(1)\nb = f(2)\nc = f(3)\n"
    req, built = _req(three, three * 2, 3)
    assert rule_candidate("move", req, built) is None  # more than MAX_LINES pasted



def test_a_copy_that_stood_alone_takes_one_blank_line_with_it() -> None:
    before = "import os\n\nfrom random import seed\n\nx = 1\n"
    now = "import os\nfrom random import seed\n\nfrom random import seed\n\nx = 1\n"
    req, built = _req(before, now, len("import os\nfrom"))
    cand = rule_candidate("move", req, built)
    assert cand is not None and cand.new == "import os\nfrom random import seed\n\nx = 1\n"
    # a blank line outside the region is not known: the copy goes, the blank above it stays
    end = now.index("\nx = 1") + 1
    req = EditRequest("file:///w/m.py", "m.py", now, 2, 12, [_hunk(before, now)])
    built = EditBuilt(EditPrompt("", now[:end - 1], now[end - 1:], 12, path="m.py"), 0, end - 1)
    cand = rule_candidate("move", req, built)
    assert cand is not None and cand.new == "import os\nfrom random import seed\n\n"
    assert candidates.stranded_blanks(["a\n", "\n", "b\n", "c\n", "\n"], {2, 3}) == {4}  # a two-line block
    assert candidates.stranded_blanks(["a\n", "\n", "b\n", "c\n", "\n"], {2}) == set()  # "c" still follows

def test_the_pasted_pair_goes_elsewhere_and_text_outside_the_region_stays() -> None:
    body = "    total = 0\n    count = len(xs)\n    return total / count\n"
    before = "def f(xs):\n" + body + "\nx = 1\n"
    now = "def f(xs):\n    count = len(xs)\n    total = 0\n" + body + "\nx = 1\n"
    assert move_edit.pasted_lines(unified_diff("m.py", before, now)) is not None
    start, end = 0, now.index("\nx = 1")
    req = EditRequest("file:///w/m.py", "m.py", now, 2, 20, [_hunk(before, now)])
    built = EditBuilt(EditPrompt("", now[:end], now[end:], 20, path="m.py"), start, end)
    cand = rule_candidate("move", req, built)
    assert cand is not None
    assert cand.new == "def f(xs):\n    count = len(xs)\n    total = 0\n    return total / count\n"


def test_undo_means_taking_the_edit_back_where_it_was_made() -> None:
    text = PASTED
    cur = len("from warnings import warn")
    hist = [_hunk(IMPORTS, PASTED)]
    assert candidates.reject_reason(text, cur, "m.py", 0, text, IMPORTS, hist) == "undo"
    other = text.replace("\nfrom warnings import warn\n", "\n", 1)
    assert other.count("warn") == 2 and candidates.reject_reason(text, cur, "m.py", 0, text, other, hist) is None
    # a substitution's undo is still one
    assert candidates.reject_reason(B1, 6, "m.py", 0, B1, B0, [_hunk(B0, B1)]) == "undo"


# -- the superseded import ---------------------------------------------------------------------------------

def test_imports_parse_with_the_names_they_bind() -> None:
    def bound(line: str) -> tuple[str, ...] | None:
        imp = import_edit.parse(line)
        return None if imp is None else imp.bound

    assert bound("from collections import OrderedDict, deque as dq  # noqa") == ("OrderedDict", "dq")
    assert bound("import os, numpy.linalg as la") == ("os", "la")
    assert bound("    from ._compat import PY3\n") == ("PY3",)
    assert bound("import delay from 'delay';") == ("delay",)
    assert bound("import {setTimeout as delay, type Foo} from 'node:timers/promises';") == ("delay", "Foo")
    assert bound("import React, { useState } from \"react\"") == ("React", "useState")
    assert bound("import * as path from 'node:path';") == ("path",)
    # nothing bound here: continued, parenthesised, star or not an import
    for line in ("from m import (", "from m import *", "from m import a, \\", "x = 1", "import './side-effect.js';",
                 "import os.path"):
        assert bound(line) is None, line


def test_a_new_binding_takes_the_name_out_of_the_old_import() -> None:
    before = "import sys\nfrom ._compat import OrderedDict, PY3\nfrom .x import y\n"
    now = "import sys\nfrom collections import OrderedDict\nfrom ._compat import OrderedDict, PY3\nfrom .x import y\n"
    req, built = _req(before, now, 20)
    cand = rule_candidate("import", req, built)
    assert cand is not None and cand.origin == "import" and cand.confidences == [import_edit.SCORE]
    assert cand.new == "import sys\nfrom collections import OrderedDict\nfrom ._compat import PY3\nfrom .x import y\n"
    ts0 = "import delay from 'delay';\nimport test from 'ava';\n"
    ts1 = "import {setTimeout as delay} from 'node:timers/promises';\n" + ts0
    req, built = _req(ts0, ts1, 5, path="t.ts")
    cand = rule_candidate("import", req, built)
    assert cand is not None and cand.new == "import {setTimeout as delay} from 'node:timers/promises';\n" \
        "import test from 'ava';\n"
    i, sug, _ = edit_results(req, built, [cand], Settings())
    assert i == 0 and sug is not None and sug.show



def test_a_superseded_import_line_takes_its_stranded_blank_line_with_it() -> None:
    before = "import sys\n\nimport attr\n\nfrom x import y\n"
    now = "import sys\nfrom attrs import attr\n\nimport attr\n\nfrom x import y\n"
    req, built = _req(before, now, 12)
    cand = rule_candidate("import", req, built)
    assert cand is not None and cand.new == "import sys\nfrom attrs import attr\n\nfrom x import y\n"

def test_no_superseded_import_without_a_new_name() -> None:
    before = "from m import a\nfrom n import b\n"
    more = "from m import a, c\nfrom n import b\n"  # c is new but bound nowhere else
    req, built = _req(before, more, 5)
    assert rule_candidate("import", req, built) is None
    same = "from m import a, b\nfrom n import b\n"
    assert import_edit.new_names(unified_diff("m.py", more, same)) == {"b"}
    assert import_edit.new_names(unified_diff("m.py", before, before.replace("from m", "from mm"))) == set()
    code = "x = 1\nfrom n import b\n"
    req, built = _req("from n import b\n", code, 2)
    assert rule_candidate("import", req, built) is None  # the edit added no import


# -- the selection stage over several candidates ------------------------------------------------------

B0 = "a = 1\nb = 2\nc = 3\nd = 4\n"
B1 = "a = 1\nb = 20\nc = 3\nd = 4\n"


def test_filter_drops_an_undo_and_the_pick_takes_the_other() -> None:
    req, built = _req(B0, B1, B1.index("b = 20") + 6)
    undo = Candidate(B0, [0.99] * 4)  # the most confident one takes the last edit back
    other = Candidate(B1.replace("d = 4", "d = 40"), [0.7] * 4, origin="sampled")
    i, sug, edits = edit_results(req, built, [undo, other], Settings())
    assert i == 1 and sug is not None and sug.show and sug.text == other.new
    assert abs(sug.score - 0.7) < 1e-9 and [(e.text) for e in edits] == ["0"]
    assert edit_results(req, built, [undo], Settings()) == (-1, None, [])


def test_ranking_prefers_shown_then_syntax_clean_then_score_with_the_gate_on_or_off() -> None:
    req, built = _req(B0, B1, B1.index("b = 20") + 6)
    broken = Candidate(B1.replace("d = 4", "d = (4"), [0.99] * 4)
    low = Candidate(B1.replace("d = 4", "d = 5"), [0.3] * 4)
    good = Candidate(B1.replace("d = 4", "d = 40"), [0.8] * 4)
    for enabled in (True, False):
        s = Settings(gate=Gate(enabled=enabled))
        i, sug, _ = edit_results(req, built, [broken, low, good], s)
        assert i == 2 and sug is not None and sug.show, enabled
        i, sug, _ = edit_results(req, built, [broken, low], s)  # the gate would show neither
        assert i == 1 and sug is not None and sug.show is (not enabled), enabled
    # ties go to the first candidate (the model's own rewrite)
    twin = Candidate(good.new.replace("40", "41"), [0.8] * 4)
    assert edit_results(req, built, [good, twin], Settings())[0] == 0


def test_one_candidate_is_exactly_the_single_rewrite_path() -> None:
    req, built = _req(B0, B1, B1.index("b = 20") + 6)
    new = B1.replace("d = 4", "d = 40")
    sug, edits = edit_result(req, built, new, [0.9] * 4, Settings())
    i, sug2, edits2 = edit_results(req, built, [Candidate(new, [0.9] * 4)], Settings())
    assert i == 0 and sug is not None and sug2 is not None and edits == edits2
    assert (sug.text, sug.score, sug.show, sug.reason) == (sug2.text, sug2.score, sug2.show, sug2.reason)


def test_pipeline_candidates_follow_the_settings() -> None:
    from edit_server.serving.pipeline import edit_candidates

    req, built = _req(BEFORE, RENAMED, RENAMED.index("(n)") + 2)
    res = GenerateResult(RENAMED, [1, 2], [0.9, 0.9], 1, 1, 10, 0, "end")
    alt = GenerateResult(RENAMED.replace("+ 1", "+ 2"), [1, 2], [0.6, 0.6], 1, 1, 10, 10, "end")
    out = Outcome(built, res, 1, None, [(alt, None)])
    rules = Settings(next_edit=NextEdit(locator="off", analog_edit=False))  # the rules' own, fixed scores
    cands, outs = edit_candidates(req, out, Settings(next_edit=NextEdit(repeat_edit=False, analog_edit=False,
                                                                         move_edit=False, import_edit=False,
                                                                         carry_edit=False)))
    assert [c.origin for c in cands] == ["model", "sampled"] and outs[1].result is alt
    cands, outs = edit_candidates(req, out, rules)  # on by default
    assert [c.origin for c in cands] == ["model", "sampled", "repeat"] and outs[2].text == cands[2].new
    # the model re-typed the region (filtered), the alternative is weaker than the repeated rename
    i, sug, _ = edit_results(req, built, cands, rules)
    assert i == 2 and sug is not None and "count" not in sug.text


def test_pipeline_offers_the_rules_unless_they_are_off() -> None:
    from edit_server.serving.pipeline import edit_candidates

    req, built = _req(IMPORTS, PASTED, len("from warnings import warn"))
    out = Outcome(built, GenerateResult(PASTED, [1], [0.9], 1, 1, 10, 0, "end"), 1, None, [])
    rules = Settings(next_edit=NextEdit(locator="off"))  # the rules' own candidates, fixed scores
    cands, outs = edit_candidates(req, out, rules)
    # the pasted import also supersedes the old one: the same deletion, the first rule's on the tie
    assert [c.origin for c in cands] == ["model", "move", "import"] and outs[1].text == cands[1].new == cands[2].new
    i, sug, _ = edit_results(req, built, cands, rules)
    assert i == 1 and sug is not None and sug.show and sug.text.count("from warnings") == 1
    cands, _ = edit_candidates(req, out, Settings(next_edit=NextEdit(move_edit=False, import_edit=False,
                                                                      locator="off")))
    assert [c.origin for c in cands] == ["model"]
    # scored by the location model the two rules' one deletion is one candidate (the first rule's)
    cands, _ = edit_candidates(req, out, Settings())
    assert [c.origin for c in cands] == ["model", "move"] and 0.0 < cands[1].confidences[0] < 1.0


def test_alternatives_wanted_only_for_local_next_edits() -> None:
    from edit_server.core.requests import FimRequest
    from edit_server.core.settings import Remote

    s3 = Settings(next_edit=NextEdit(candidates=3))
    edit = EditRequest("u", "/w/a.py", "x = 1\n", 1, 0)
    assert alternatives_wanted(Job("u", edit, s3)) == 2
    assert alternatives_wanted(Job("u", edit, Settings())) == 0
    assert alternatives_wanted(Job("u", FimRequest("u", "/w/a.py", "x", 1, 1, True), s3)) == 0
    assert alternatives_wanted(Job("u", edit, Settings(next_edit=NextEdit(candidates=3),
                                                       remote=Remote(url="http://127.0.0.1:1")))) == 0


# -- the engine's sampled alternatives (tiny random model) --------------------------------------------


@pytest.fixture(scope="module")
def eng() -> Any:
    from engine import Engine

    return Engine.load("tiny-random", device="cpu")


def test_variants_are_sampled_reproducible_and_reuse_the_prompt_kv(eng: Any) -> None:
    region = "def add(a, b):\n    return a + b\n"
    p = EditPrompt("import os\n\n", region, "\nprint(add(1, 2))\n", 5, path="m.py")
    greedy = eng.complete([RewriteCall(p, cache_key="doc")])[0]
    assert eng.complete([RewriteCall(p, cache_key="doc", variant=0)])[0].tokens == greedy.tokens
    v1 = eng.complete([RewriteCall(p, cache_key="doc", variant=1)])[0]
    v2 = eng.complete([RewriteCall(p, cache_key="doc", variant=2)])[0]
    assert v1.cached_tokens > 0 and v1.cached_tokens >= v1.prompt_tokens - eng.block_size  # prompt KV reused
    again = eng.complete([RewriteCall(p, variant=1)])[0]
    assert again.tokens == v1.tokens  # seeded: the same variant twice is the same text
    assert len({tuple(greedy.tokens), tuple(v1.tokens), tuple(v2.tokens)}) == 3


def test_worker_returns_the_alternatives(eng: Any) -> None:
    from edit_server.serving.worker import EngineWorker

    states: list[tuple[str, str]] = []
    w = EngineWorker(lambda s, m: states.append((s, m)))
    try:
        w.load("tiny-random", "cpu", Settings(), eng)
        assert w.ready.wait(60), states
        text = "def f(w):\n    return w\n"
        one = w.submit(Job("u", EditRequest("u", "/w/a.py", text, 1, 5), Settings())).result(60)
        three = w.submit(Job("u", EditRequest("u", "/w/a.py", text, 1, 5),
                             Settings(next_edit=NextEdit(candidates=3)))).result(60)
        assert one is not None and one.alternatives == []
        assert three is not None and len(three.alternatives) == 2
        assert three.result.tokens == one.result.tokens  # the first candidate is the single rewrite
    finally:
        w.stop()
        w.join(5)


def test_the_decision_to_skip_the_model_holds_in_both_directions(tmp_path: Path) -> None:
    """`select.rewrite_hidden`: hidden (the model not asked) only when the gate is on, no reward decides and
    neither the model's rewrites (``edit``) nor their echoes (``edit:echo``) have a finite threshold — the
    model's own or the user's calibration; shown whenever any of those fails."""
    inf = float("inf")
    never = EngineInfo(show_thresholds={"edit": {"threshold": inf}})
    assert rewrite_hidden(Settings(), never, aligned=False)  # edit:echo takes edit's: both inf
    both = EngineInfo(show_thresholds={"edit": {"threshold": inf}, "edit:echo": {"threshold": inf}})
    assert rewrite_hidden(Settings(), both, aligned=False)
    assert not rewrite_hidden(Settings(), EngineInfo(show_thresholds={"edit": {"threshold": 0.9}}), aligned=False)
    echo = EngineInfo(show_thresholds={"edit": {"threshold": inf}, "edit:echo": {"threshold": 0.8}})
    assert not rewrite_hidden(Settings(), echo, aligned=False)  # an echoing rewrite could still show
    assert not rewrite_hidden(Settings(), None, aligned=False)  # no engine info: gate.threshold
    assert not rewrite_hidden(Settings(), EngineInfo(), aligned=False)  # nothing shipped: gate.threshold
    assert not rewrite_hidden(Settings(gate=Gate(enabled=False)), never, aligned=False)
    assert not rewrite_hidden(Settings(), never, aligned=True)  # the reward decides, not the thresholds
    assert not rewrite_hidden(Settings(gate=Gate(calibration="off")), never, aligned=False)
    mine = tmp_path / "gate.json"  # the user's calibration wins over the model's, either way
    mine.write_text(json.dumps({"kinds": {"edit": {"threshold": 0.4}}}))
    assert not rewrite_hidden(Settings(gate=Gate(calibration=str(mine))), never, aligned=False)
    mine.write_text(json.dumps({"kinds": {"edit": {"threshold": inf}}}))
    os.utime(mine, (1, 1))  # a new mtime: the calibration is read again
    shipped = EngineInfo(show_thresholds={"edit": {"threshold": 0.9}})
    assert rewrite_hidden(Settings(gate=Gate(calibration=str(mine))), shipped, aligned=False)
    assert not rewrite_hidden(Settings(gate=Gate(calibration=str(tmp_path / "none.json"))), never, aligned=False)


class CountingEngine:
    """``eng`` with the show thresholds a model ships, counting the engine calls."""

    def __init__(self, eng: Any, thresholds: dict[str, Any]) -> None:
        self._eng, self.calls = eng, 0
        self.info = dataclasses.replace(eng.info, show_thresholds=thresholds)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._eng, name)

    def complete(self, calls: Any) -> Any:
        self.calls += len(calls)
        return self._eng.complete(calls)


def test_the_model_is_not_asked_for_a_rewrite_no_threshold_would_show(eng: Any) -> None:
    from edit_server.core.requests import FimRequest
    from edit_server.core.settings import Gate
    from edit_server.serving.worker import EngineWorker

    never = CountingEngine(eng, {"edit": {"threshold": float("inf")}, "fim": {"threshold": 0.5}})
    w = EngineWorker(lambda s, m: None)
    try:
        w.load("tiny-random", "cpu", Settings(), never)
        assert w.ready.wait(60)
        text = "def f(w):\n    return w\n"
        edit = EditRequest("u", "/w/a.py", text, 1, 5)
        out = w.submit(Job("u", edit, Settings())).result(60)
        assert out is not None and never.calls == 0  # gate on, threshold inf: no model call
        assert out.result.finish_reason == "skipped" and out.result.text == out.built.prompt.region
        assert out.built.region_start < 5 < out.built.region_end  # the rules still get their region
        # the model runs: gate off, the engine route (the caller decides), a FIM request, a user's calibration
        w.submit(Job("u", edit, Settings(gate=Gate(enabled=False)))).result(60)
        assert never.calls == 1
        w.submit(Job("u", edit, Settings(), gated=False)).result(60)
        assert never.calls == 2
        w.submit(Job("u", FimRequest("u", "/w/a.py", text, 1, 5, True), Settings())).result(60)
        assert never.calls == 3
        w.submit(Job("u", edit, Settings(gate=Gate(calibration="off")))).result(60)
        assert never.calls == 4  # "off": gate.threshold 0.5 instead of the model's
    finally:
        w.stop()
        w.join(5)
    shown = CountingEngine(eng, {"edit": {"threshold": 0.9}})
    w = EngineWorker(lambda s, m: None)
    try:
        w.load("tiny-random", "cpu", Settings(), shown)
        assert w.ready.wait(60)
        w.submit(Job("u", EditRequest("u", "/w/a.py", "x = 1\n", 1, 3), Settings())).result(60)
        assert shown.calls == 1  # a finite threshold: asked
    finally:
        w.stop()
        w.join(5)
    echoes = CountingEngine(eng, {"edit": {"threshold": float("inf")}, "edit:echo": {"threshold": 0.7}})
    w = EngineWorker(lambda s, m: None)
    try:
        w.load("tiny-random", "cpu", Settings(), echoes)
        assert w.ready.wait(60)
        w.submit(Job("u", EditRequest("u", "/w/a.py", "x = 1\n", 1, 3), Settings())).result(60)
        assert echoes.calls == 1  # free rewrites never shown, echoes of the history may be: asked
    finally:
        w.stop()
        w.join(5)


def test_replay_table_rows(tmp_path) -> None:
    """`edit-server eval table --replay`: docs/QUALITY.md's row format from a run's report.json."""
    import json

    from evals.table import replay_table

    cat = {"next-edit": {"n": 4, "accept_rate": 0.25, "line_f1_mean": 0.375, "shown_rate": 0.5},
           "elsewhere": {"n": 2, "no_edit_correct": 0.5}, "done": {"n": 2, "no_edit_correct": 1.0}}
    summ = {"n": 8, "no_edit_correct": 0.75, "shown_rate": 0.375, "precision_when_shown": 1 / 3,
            "latency_ms_p50": 1234.0, "latency_ms_p95": 5678.0}
    gated = {"gate": {"threshold": 0.5, "summary": {**summ, "shown_rate": 0.125},
                      "by_category": {**cat, "next-edit": {**cat["next-edit"], "shown_rate": 0.25}}}}
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "report.json").write_text(json.dumps(
        {"config": {"source": "replay x", "gate": False}, "summary": summ, "by_category": cat, "gated": gated}))
    lines = replay_table(tmp_path).splitlines()
    assert lines[4] == ("| gate off (every suggestion) | 8 | 25 % (1/4) | 0.38 | 50 % | 50 % | 100 % | 75 % "
                        "| 38 % | 33 % |")
    assert lines[5].startswith("| gate (score ≥ 0.5, no syntax error) | 8 | 25 % (1/4) | 0.38 | 25 % |")
    assert "latency p50 1,234 ms, p95 5,678 ms" in lines
    assert not any(ln.startswith("shown by origin") for ln in lines)  # no results.jsonl: no origin line
    recs = [{"id": "a", "shown": True, "origin": "model", "accepted": False, "quiet_case": True},
            {"id": "b", "shown": True, "origin": "repeat", "accepted": True, "quiet_case": False},
            {"id": "c", "shown": True, "origin": "model", "accepted": False, "quiet_case": False},
            {"id": "d", "shown": False, "origin": None, "accepted": False, "quiet_case": True}]
    # a line cut by a crash is skipped, as everywhere results.jsonl is read (`evals.store.read_records`)
    (tmp_path / "run" / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs) + '{"id": "e", "sh')
    assert ("shown by origin: model 2 (0 right, 1 in quiet cases); repeat 1 (1 right, 0 in quiet cases)"
            in replay_table(tmp_path).splitlines())


def test_pipeline_asks_for_alternatives_on_next_edits_only_not_on_the_engine_route(eng: Any) -> None:
    """A next edit with ``nextEdit.candidates`` 3 makes 3 engine calls (one per candidate); the engine route
    (``/v1/engine/complete``: the caller gets one result) makes one."""
    import asyncio

    from edit_server.serving.pipeline import Pipeline

    class Counting:
        def __init__(self, inner: Any) -> None:
            self.inner, self.calls = inner, []

        def __getattr__(self, name: str) -> Any:
            return getattr(self.inner, name)

        def complete(self, calls: Any) -> Any:
            self.calls.append([getattr(c, "variant", 0) for c in calls])
            return self.inner.complete(calls)

    counting = Counting(eng)
    s = Settings(feedback_db=":memory:", next_edit=NextEdit(candidates=3))
    p = Pipeline(s, lambda *_: None, engine=counting)  # type: ignore[arg-type]
    try:
        assert p.worker.ready.wait(30)
        prompt = EditPrompt("import os\n\n", "def add(a, b):\n    return a + b\n", "\n", 5, path="m.py")
        assert asyncio.run(p.engine_call("k", prompt)) is not None
        assert counting.calls == [[0]]
        text = "def f(w):\n    return w\n"
        p.open_document("file:///w/a.py", "/w/a.py", text, 1)
        asyncio.run(p.next_edit("file:///w/a.py", 5))
        assert counting.calls[1:] == [[0], [1], [2]]
    finally:
        p.stop()


def test_edit_confidences_are_the_changed_tokens() -> None:
    """A rewrite is gated on the tokens that make its edit, not on the copied rest of the region."""
    from engine.calls import edit_confidences

    src = [1, 2, 3, 4, 5]
    conf = [0.99, 0.98, 0.3, 0.97, 0.96, 0.95, 0.94]
    assert edit_confidences(src, [1, 2, 9, 4, 5], conf) == [0.3]  # one token replaced
    assert edit_confidences(src, [1, 2, 3, 7, 8, 4, 5], conf) == [0.97, 0.96]  # two inserted
    assert edit_confidences(src, [1, 2, 4, 5], conf) == [0.3]  # 3 deleted: the token after it stands for it
    assert edit_confidences(src, [1, 2, 3], conf) == [0.3]  # the end deleted: the last token
    assert edit_confidences(src, src, conf) == []  # a copy makes no edit
    assert edit_confidences(src, [], []) == []


def test_rewrites_carry_their_changed_confidences_and_the_gate_scores_them(eng: Any) -> None:
    from edit_server.serving.pipeline import edit_candidates, edit_scored

    region = "def add(a, b):\n    return a + b\n"
    p = EditPrompt("import os\n\n", region, "\nprint(add(1, 2))\n", 5, path="m.py")
    res = eng.complete([RewriteCall(p)])[0]
    assert res.changed is not None and len(res.changed) <= len(res.tokens)
    assert set(res.changed) <= set(res.confidences)
    # the server: the model's candidate carries the changed tokens' confidences, else all of them
    req, built = _req(BEFORE, RENAMED, RENAMED.index("(n)") + 2)
    both = GenerateResult(RENAMED, [1, 2, 3], [0.99, 0.4, 0.99], 1, 1, 10, 0, "end", changed=[0.4])
    cands, _ = edit_candidates(req, Outcome(built, both), Settings(next_edit=NextEdit(repeat_edit=False)))
    assert cands[0].confidences == [0.4]
    remote = GenerateResult(RENAMED, [1, 2, 3], [0.99, 0.4, 0.99], 1, 1, 10, 0, "end")  # cannot tell: all
    assert edit_scored(remote) == [0.99, 0.4, 0.99]


def test_the_repeated_edit_is_gated_apart_from_the_models_rewrites(tmp_path: Any) -> None:
    """The model's shipped ``edit`` threshold is about its own rewrites; the repeated edit (a rule) is held
    against its own calibration (``edit:repeat``), else ``gate.threshold`` — and says so to clients and evals."""
    import json

    from edit_server.cli.align import from_eval
    from edit_server.lsp.convert import inline_edit
    from edit_server.selectivity.thresholds import gate_kind
    from evals.runners import suggestion_origin

    req, built = _req(BEFORE, RENAMED, RENAMED.index("(n)") + 2)
    model = Candidate(RENAMED.replace("+ 1", "+ 2"), [0.99] * 3)
    rep = rule_candidate("repeat", req, built)
    assert rep is not None and rep.origin == "repeat"
    never = {"edit": float("inf")}  # a model whose own rewrites were never right on the calibration runs
    i, sug, _ = edit_results(req, built, [model, rep], Settings(), never)
    assert i == 1 and sug is not None and sug.show and sug.origin == "repeat" and sug.threshold == 0.5
    i, sug, _ = edit_results(req, built, [model], Settings(), never)
    assert i == 0 and sug is not None and not sug.show and sug.reason == "low score" and sug.origin == "model"
    assert (gate_kind("edit", "model"), gate_kind("edit", "sampled"), gate_kind("edit", None),
            gate_kind("edit", "repeat")) == ("edit", "edit", "edit", "edit:repeat")
    # the accept command names the origin; an eval records it; `align gate` fits the rule's kind apart
    item = inline_edit(RENAMED, "file:///w/m.py", 2, type("E", (), {"start": 0, "end": 1, "text": "x"})(),
                       "s1", 0.95, "repeat")
    assert item["command"]["arguments"][0]["origin"] == "repeat"
    assert suggestion_origin({"edits": [item]}) == "repeat" and suggestion_origin({"edits": []}) is None
    rows = [{"id": "a", "kind": "edit", "score": 0.95, "suggestion": [["m.py", 0, 1, "x"]], "accepted": True,
             "origin": "repeat"},
            {"id": "b", "kind": "edit", "score": 0.9, "suggestion": [["m.py", 0, 1, "y"]], "accepted": False,
             "origin": "model"}]
    (tmp_path / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert [(o.kind, o.accepted) for o in from_eval(tmp_path)] == [("edit:repeat", True), ("edit", False)]


def test_feedback_keeps_the_repeated_edit_apart(eng: Any) -> None:
    """Shown suggestions go to the feedback store under the gate's kind: `align gate --feedback` calibrates
    the repeated edit (``edit:repeat``) apart from the model's rewrites (``edit``), as it does from evals."""
    from edit_server.core.requests import Suggestion
    from edit_server.serving.pipeline import Pipeline

    p = Pipeline(Settings(feedback_db=":memory:"), lambda *_: None, engine=eng)
    try:
        req, built = _req(BEFORE, RENAMED, 5)
        out = Outcome(built, GenerateResult(RENAMED, [], [], 0, 0, 0, 0, "end"))
        for sid, origin in (("s1", "repeat"), ("s2", "model")):
            p._offer(Suggestion(sid, "edit", RENAMED, 0, 1, 0.95, True, origin=origin), out, req.uri,
                     built.prompt)
        assert p.feedback._pending["s1"].kind == "edit:repeat" and p.feedback._pending["s2"].kind == "edit"
    finally:
        p.stop()
