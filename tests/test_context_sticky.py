"""Sticky FIM context (edit_server.context.sticky): typing inside the last window only grows the prompt at
the cursor, so the engine's prefix KV cache recomputes a few tokens per keystroke instead of the window."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

import edit_server.context.builder as builder_mod
from edit_server.context import ContextBuilder
from edit_server.context import sticky as sticky_mod
from engine.templates import render_edit, render_fim
from engine.textdiff import common_prefix as _lcp
from tests.context_util import (
    TOK,
    Hunk,
    MergingTokenizer,
    indexed_workspace,
)


@pytest.fixture
def ws(tmp_path: Path) -> Iterator[tuple[ContextBuilder, str, str]]:
    b, path, text = indexed_workspace(tmp_path)
    yield b, path, text
    b.close()


def _type(b: ContextBuilder, path: str, text: str, offset: int, typed: str, version: int = 2,
          history: tuple[Hunk, ...] = (), budget: int = 700) -> tuple[str, list[tuple[bool, int, int]]]:
    """Type ``typed`` at ``offset`` one character at a time, a build after each; per keystroke:
    (sticky, prompt tokens, tokens recomputed against the previous prompt)."""
    prev = render_fim(TOK, b.build_fim(path, text, offset, list(history), budget=budget).prompt).ids
    out = []
    for i, ch in enumerate(typed):
        text = text[:offset + i] + ch + text[offset + i:]
        b.update_document(path, text, version + i)
        fim = b.build_fim(path, text, offset + i + 1, list(history), budget=budget)
        assert fim.report.total <= budget
        ids = render_fim(TOK, fim.prompt).ids
        assert len(ids) == fim.report.total
        out.append((fim.report.sticky, len(ids), len(ids) - _lcp(prev, ids)))
        prev = ids
    return text, out


def test_typing_inside_the_window_recomputes_only_the_cursor_end(ws) -> None:
    b, path, text = ws
    offset = text.index("def f30") + len("def f30(x):\n    y = ")
    text2, steps = _type(b, path, text, offset, "helper(x + 1")
    assert [s for s, _, _ in steps] == [True] * len("helper(x + 1")
    # byte-level tokenizer: a keystroke adds one token at the prefix's end; behind it the spml prompt
    # has the cursor marker, the rest of the line ("helper(x, 30)") and fim_middle: those are recomputed
    rest = len(TOK.encode("helper(x, 30)"))
    assert [r for _, _, r in steps] == [1 + 1 + rest + 1] * len("helper(x + 1")
    fim = b.build_fim(path, text2, offset + 12, [], budget=700)
    assert fim.prompt.prefix.endswith("y = helper(x + 1") and fim.prompt.suffix.startswith("helper(x, 30)")
    # without stickiness the same keystrokes move the window and the sources: far more is recomputed
    b.update_options(sticky_ttl_s=0.0)
    _, fresh = _type(b, path, text, offset, "helper(x + 1", version=100)
    assert not any(s for s, _, _ in fresh)
    assert sum(r for _, _, r in fresh) > 10 * sum(r for _, _, r in steps)


def test_a_jump_an_edit_outside_or_new_options_mean_a_full_build(ws) -> None:
    b, path, text = ws
    offset = text.index("def f30") + len("def f30(x):\n    y = ")
    text, steps = _type(b, path, text, offset, "ab")
    assert steps[-1][0]
    far = text.index("def f2(")  # outside the 700-token window around f30
    fim = b.build_fim(path, text, far, [], budget=700)
    assert not fim.report.sticky
    back = b.build_fim(path, text, offset + 2, [], budget=700)  # a new full build there
    assert not back.report.sticky
    assert b.build_fim(path, text, offset + 2, [], budget=700).report.sticky
    edited = "# header edit\n" + text  # outside the window, before it
    b.update_document(path, edited, 50)
    assert not b.build_fim(path, edited, offset + 2 + 14, [], budget=700).report.sticky
    assert b.build_fim(path, edited, offset + 2 + 14, [], budget=700).report.sticky
    b.update_options(exclude=("**/nothing.sql",))  # new exclusions: nothing built before is reused
    assert not b.build_fim(path, edited, offset + 2 + 14, [], budget=700).report.sticky
    assert not b.build_fim(path, edited, offset + 2 + 14, [], budget=900).report.sticky  # another budget


def test_other_files_history_and_age_refresh_the_context(ws, monkeypatch: pytest.MonkeyPatch) -> None:
    b, path, text = ws
    offset = text.index("def f30") + len("def f30(x):\n    y = ")
    mine = (Hunk(path, "@@ -1 +1 @@\n-a\n+b\n", 1.0, open=True),)
    b.build_fim(path, text, offset, list(mine), budget=700)
    assert b.build_fim(path, text, offset, list(mine), budget=700).report.sticky  # own edits: still sticky
    other = (*mine, Hunk(str(Path(path).parent / "lib" / "util.py"), "@@ -1 +1 @@\n-x = 1\n+x = 2\n", 2.0))
    fim = b.build_fim(path, text, offset, list(other), budget=700)
    assert not fim.report.sticky and any("x = 2" in h for h in fim.prompt.history)
    assert b.build_fim(path, text, offset, list(other), budget=700).report.sticky
    now = sticky_mod.time.monotonic()
    monkeypatch.setattr(sticky_mod.time, "monotonic", lambda: now + sticky_mod.TTL_S + 1)
    assert not b.build_fim(path, text, offset, list(other), budget=700).report.sticky


def test_a_window_that_outgrows_its_room_is_rebuilt_within_the_budget(ws) -> None:
    b, path, text = ws
    offset = text.index("def f30") + len("def f30(x):\n    y = ")
    _, steps = _type(b, path, text, offset, "x " * 200, budget=700)
    flags = [s for s, _, _ in steps]
    assert flags[0] and not all(flags)  # some keystroke overflowed the window's room: a full build
    assert max(n for _, n, _ in steps) <= 700


def test_a_budget_cut_window_leaves_room_to_type_into(ws, monkeypatch: pytest.MonkeyPatch) -> None:
    """Built STICKY_GROW tokens (at most an eighth of its room) short, so the next keystrokes keep the
    build instead of overflowing it into a full rebuild (new sources, a ~1K-token re-prefill)."""
    b, path, text = ws
    offset = text.index("def f30") + len("def f30(x):\n    y = ")
    totals = {}
    for grow in (0, 10_000):
        monkeypatch.setattr(builder_mod, "STICKY_GROW", grow)
        b.update_options(sticky_ttl_s=sticky_mod.TTL_S)  # drops the sticky builds
        rep = b.build_fim(path, text, offset, [], budget=1500).report
        assert rep.total <= 1500 and not rep.sticky
        totals[grow] = rep.total
    assert 1500 // 16 <= totals[0] - totals[10_000] <= 1500 // 8 + 16  # an eighth of the window's room
    monkeypatch.setattr(builder_mod, "STICKY_GROW", 64)
    b.update_options(sticky_ttl_s=sticky_mod.TTL_S)
    _, steps = _type(b, path, text, offset, "x " * 40, budget=1500)
    assert all(s for s, _, _ in steps) and steps[-1][1] - steps[0][1] >= 32


def test_a_next_edit_starts_with_the_fim_prompts_sections(ws) -> None:
    """The edit prompt reuses the sticky FIM build's sections (so the engine seeds its KV from the FIM
    slot) with a fresh history; the budget stays exact; without a fresh FIM build it collects its own."""
    b, path, text = ws
    offset = text.index("def f30") + len("def f30(x):\n    y = ")
    fim = b.build_fim(path, text, offset, [], budget=700)
    mine = [Hunk(path, "@@ -1 +1 @@\n-old_name = 1\n+new_name = 1\n", 5.0)]
    edit = b.build_edit(path, text, offset, mine, budget=700)
    assert edit.report.sticky and edit.prompt.sections == fim.prompt.sections
    assert any("new_name" in h for h in edit.prompt.history)  # this file's edit is in the edit prompt
    fim_ids = render_fim(TOK, fim.prompt).ids
    edit_ids = render_edit(TOK, edit.prompt).ids
    assert len(edit_ids) == edit.report.total <= 700
    shared = sum(1 + len(TOK.encode(f"{s.path}\n{s.text}")) for s in fim.prompt.sections)
    assert shared > 100 and edit_ids[:shared] == fim_ids[:shared]
    b.update_options(exclude=("**/x.sql",))  # drops the sticky build: the edit collects its own context
    assert not b.build_edit(path, text, offset, mine, budget=700).report.sticky


def test_a_hunk_of_another_file_that_falls_out_of_the_recent_list_keeps_the_build(ws) -> None:
    """The history holds the n most recent hunks: as this file's hunks come in, another file's older
    hunk drops out. The build that showed it stays (a stale hunk in the prompt beats a re-prefill);
    a new hunk of another file still means a full build."""
    b, path, text = ws
    offset = text.index("def f30") + len("def f30(x):\n    y = ")
    util = str(Path(path).parent / "lib" / "util.py")
    older = Hunk(util, "@@ -1 +1 @@\n-x = 1\n+x = 2\n", 1.0)
    fim = b.build_fim(path, text, offset, [older], budget=700)
    assert not fim.report.sticky and any("x = 2" in h for h in fim.prompt.history)
    mine = Hunk(path, "@@ -1 +1 @@\n-a\n+b\n", 2.0, open=True)
    kept = b.build_fim(path, text, offset, [mine], budget=700)  # the older hunk fell out of the list
    assert kept.report.sticky and kept.report.sticky_miss == ""
    assert kept.prompt.history == fim.prompt.history
    b.update_options(sticky_ttl_s=sticky_mod.TTL_S)  # drops the sticky builds
    mine2 = Hunk(path, "@@ -2 +2 @@\n-c\n+d\n", 2.5, open=True)
    assert not b.build_fim(path, text, offset, [mine, mine2], budget=700).report.sticky
    # mine2 undone: the older hunk of util.py is back in the recent list; the build did not show it,
    # but it is older than what the build saw: the build stays
    assert b.build_fim(path, text, offset, [older, mine], budget=700).report.sticky
    newer = Hunk(util, "@@ -1 +1 @@\n-x = 2\n+x = 3\n", 3.0)
    rebuilt = b.build_fim(path, text, offset, [mine, newer], budget=700)
    assert not rebuilt.report.sticky and rebuilt.report.sticky_miss == "other files' history"


def test_typing_stays_sticky_when_per_line_counts_overestimate(tmp_path: Path) -> None:
    """A GPT-2-style tokenizer merges "\\n" with the next line's indentation, so per-line sums overcount
    the window: the build is measured exactly, leaves its reserve free (it is not grown back to the
    budget) and a keystroke compares what it added against that reserve, not per-line sums against
    exact ones — typing keeps the build, and the window's first line, for many keystrokes."""
    tok = MergingTokenizer(" ")
    b, path, text = indexed_workspace(tmp_path, tokenizer=tok)
    assert not b.counter.exact and b.counter.exact_text
    offset = text.index("def f30") + len("def f30(x):\n    y = ")
    first = b.build_fim(path, text, offset, [], budget=700)
    assert not first.report.sticky and first.report.window_lines[0] > 0  # cut by the budget
    assert 700 - first.report.total >= 700 // 16  # the reserve to type into is still free
    typed = "helper(x + 1, y) + other(z)"
    lines = []
    for i, ch in enumerate(typed):
        text = text[:offset + i] + ch + text[offset + i:]
        b.update_document(path, text, 2 + i)
        fim = b.build_fim(path, text, offset + i + 1, [], budget=700)
        assert len(render_fim(tok, fim.prompt).ids) == fim.report.total <= 700
        lines.append((fim.report.sticky, fim.report.window_lines[0]))
    assert lines == [(True, first.report.window_lines[0])] * len(typed)
    b.close()
