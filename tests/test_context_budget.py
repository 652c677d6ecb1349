"""Context builder budget: every source within its share, the rendered prompt within the total,
exactly, in tokens of the real tokenizer (checked by rendering with engine.templates)."""

from __future__ import annotations

from pathlib import Path

import pytest

from edit_server.context import ContextBuilder
from edit_server.context.budget import OVERHEAD_EDIT, OVERHEAD_FIM
from engine.templates import fim_specials, render_edit, render_fim
from engine.tokenizer import Tokenizer
from tests.context_util import TOK, Hunk, MergingTokenizer, options, two_module_workspace

UTIL = '''"""Utilities."""


def helper(a, b):
    """Multiply."""
    return a * b


class Thing:
    def __init__(self, n):
        self.n = n

    def grow(self, k):
        return Thing(self.n + k)
'''


def _main_text(n_funcs: int = 40) -> str:
    body = "".join(f"\n\ndef f{i}(x):\n    y = helper(x, {i})\n    return Thing(y).grow({i})\n"
                   for i in range(n_funcs))
    return "from lib.util import helper, Thing\nimport lib.util\n" + body


@pytest.fixture
def ws(tmp_path: Path) -> tuple[ContextBuilder, Path, str]:
    text = _main_text()
    b, main = two_module_workspace(tmp_path, UTIL, text)
    b.update_document(str(tmp_path / "other.py"), "def other_fn():\n    return 42\n" * 5, 1)
    b.update_document(str(main), text, 1)
    b.build_fim(str(main), text, 10, [])  # schedules indexing of the open document
    b.wait_idle()
    yield b, main, text
    b.close()


def _history(main: Path, tmp: Path) -> list[Hunk]:
    return [Hunk(str(main), "--- a/main.py\n+++ b/main.py\n@@ -1 +1 @@\n-old\n+new older\n", 1.0),
            Hunk(str(tmp / "lib" / "util.py"), "--- a/lib/util.py\n+++ b/lib/util.py\n@@ -1 +1 @@\n-a\n+b\n", 2.0),
            Hunk(str(main), "--- a/main.py\n+++ b/main.py\n@@ -5 +5 @@\n-x\n+OPEN_HUNK\n", 3.0, open=True)]


def _check_exact(b: ContextBuilder, build, kind: str, budget: int) -> None:
    rep, p = build.report, build.prompt
    rendered = (render_fim if kind == "fim" else render_edit)(TOK, p)
    assert len(rendered.ids) == rep.total <= budget
    # every source's count is exactly what the templates encode
    by_kind: dict[str, int] = {}
    for s in p.sections:
        by_kind[s.kind] = by_kind.get(s.kind, 0) + 1 + len(TOK.encode(f"{s.path}\n{s.text}"))
    srcs = {r.name: r for r in rep.sources}
    kinds = {"definitions": ["definition"], "imports": ["import"], "open_files": ["open_file"],
             "git": ["git_diff", "cochange", "recent"]}
    for name, ks in kinds.items():
        assert srcs[name].used == sum(by_kind.get(k, 0) for k in ks)
    hist = (1 + sum(len(TOK.encode(d)) for d in p.history)) if p.history else 0
    assert srcs["history"].used == hist
    # each source within its allowance; allowances chain (unused share flows down the priorities)
    avail = budget - rep.fixed
    order = rep.sources
    sh = b.options.shares if kind == "fim" else b.options.edit_shares  # a next edit's: its history first
    assert order[0].allowed >= int(avail * sh.history)
    for prev, cur in zip(order, order[1:], strict=False):
        share = {"definitions": sh.definitions, "imports": sh.imports, "git": sh.git,
                 "open_files": sh.open_files}[cur.name]
        assert cur.allowed == int(avail * share) + prev.allowed - prev.used
    for r in order:  # a next edit reusing the FIM build's sections: they were sized for that prompt
        assert 0 <= r.used and (r.used <= r.allowed or kind == "edit" and rep.sticky and r.name != "history")
    assert rep.window.used <= rep.window.allowed
    if kind == "fim":
        assert rep.window.used == len(TOK.encode(p.prefix)) + len(TOK.encode(p.suffix))
        assert rep.fixed == 1 + len(TOK.encode(f"{p.path}\n")) + fim_specials(p) and fim_specials(p) <= OVERHEAD_FIM
    else:
        assert rep.window.used == len(TOK.encode(p.before)) + len(TOK.encode(p.after))
        region = len(TOK.encode(p.region[: p.cursor])) + len(TOK.encode(p.region[p.cursor:]))
        assert rep.fixed == 1 + len(TOK.encode(f"{p.path}\n")) + OVERHEAD_EDIT + region


@pytest.mark.parametrize("budget", [90, 150, 300, 700, 1500, 4000, 20000])
def test_budget_is_exact(ws, tmp_path: Path, budget: int) -> None:
    b, main, text = ws
    offset = text.index("def f20") + 12
    hist = _history(main, tmp_path)
    fim = b.build_fim(str(main), text, offset, hist, budget=budget)
    _check_exact(b, fim, "fim", budget)
    assert fim.prompt.prefix.endswith(text[:offset][-5:]) and text[offset:].startswith(fim.prompt.suffix)
    edit = b.build_edit(str(main), text, offset, hist, budget=budget)
    _check_exact(b, edit, "edit", budget)
    p = edit.prompt
    assert text[edit.region_start:edit.region_end] == p.region
    assert edit.region_start + p.cursor == offset
    assert text[: edit.region_start].endswith(p.before) and text[edit.region_end:].startswith(p.after)


def test_sources_found_and_large_budget_takes_everything(ws) -> None:
    b, main, text = ws
    offset = text.index("def f20") + 12
    fim = b.build_fim(str(main), text, offset, [])
    assert fim.report.budget == 32768
    kinds = {(s.kind, s.path) for s in fim.prompt.sections}
    assert ("import", "lib/util.py") in kinds and ("definition", "lib/util.py") in kinds
    assert ("open_file", "other.py") in kinds
    defs = [s.text for s in fim.prompt.sections if s.kind == "definition"]
    assert any(d.startswith("def helper(a, b):") for d in defs) and any(d.startswith("class Thing") for d in defs)
    assert fim.prompt.prefix + fim.prompt.suffix == text  # whole file fits


def test_history_rules(ws, tmp_path: Path) -> None:
    b, main, text = ws
    hist = _history(main, tmp_path)
    fim = b.build_fim(str(main), text, 5, hist)
    assert not any("OPEN_HUNK" in d for d in fim.prompt.history)  # visible in the prefix already
    assert [d.splitlines()[0] for d in fim.prompt.history] == ["--- a/main.py", "--- a/lib/util.py"]  # oldest first
    edit = b.build_edit(str(main), text, 5, hist)
    assert any("OPEN_HUNK" in d for d in edit.prompt.history)


def test_this_file_history_first(ws, tmp_path: Path) -> None:
    from edit_server.context.budget import Shares

    b, main, text = ws
    hist = _history(main, tmp_path)
    mine = hist[2].diff
    cost = 1 + len(TOK.encode(mine))
    budget = 3000
    share = (cost + 2) / budget  # room for exactly this file's newest hunk
    tight = Shares(window=0.05, history=share * budget / (budget - 60))
    opts = options(git=False, index_workspace=False, shares=tight, edit_shares=tight)
    small = ContextBuilder([tmp_path], TOK, opts)
    r = small.build_edit(str(main), text, 5, hist, budget=budget)
    small.close()
    assert r.prompt.history == (mine,)


def test_edit_history_is_capped_at_the_models_count(ws, tmp_path: Path) -> None:
    """``max_history``: the newest diffs only (this file's first), oldest first in the prompt; FIM keeps the
    options' count. The server passes the model's trained count (serving/contexts.edit_history)."""
    from edit_server.core.settings import Settings
    from edit_server.serving.contexts import edit_history
    from engine.templates import EDIT_HISTORY

    b, main, text = ws
    hist = [Hunk(str(main), f"--- a/main.py\n+++ b/main.py\n@@ -{i} +{i} @@\n-x\n+edit{i}\n", float(i))
            for i in range(1, 7)]
    full = b.build_edit(str(main), text, 5, hist)
    assert [d.rsplit("+", 1)[1] for d in full.prompt.history] == [f"edit{i}\n" for i in range(1, 7)]
    capped = b.build_edit(str(main), text, 5, hist, max_history=EDIT_HISTORY)
    assert [d.rsplit("+", 1)[1] for d in capped.prompt.history] == ["edit4\n", "edit5\n", "edit6\n"]
    assert capped.report.total < full.report.total
    assert len(b.build_fim(str(main), text, 5, hist).prompt.history) == 6

    class Eng:
        def __init__(self, info: dict) -> None:
            self.info = info

    s6, s2 = Settings(), Settings(history_size=2)
    assert s6.history_size == 6
    assert edit_history(s6, Eng({"edit_history": 3})) == 3
    assert edit_history(s2, Eng({"edit_history": 3})) == 2  # the user's smaller setting wins
    assert edit_history(s6, Eng({"edit_history": None})) == 6  # a model that does not say: the setting
    assert edit_history(s6, None) == 6


@pytest.mark.parametrize("follow,counting", [(" ", "blocks"), (" \nabcdefghijklmnopqrstuvwxyz", "render")])
@pytest.mark.parametrize("budget", [120, 400, 1500])
def test_non_additive_tokenizers_stay_within_budget(tmp_path: Path, budget: int, follow: str,
                                                    counting: str) -> None:
    tok = MergingTokenizer(follow)
    main = tmp_path / "main.py"
    text = _main_text(60)
    main.write_text(text)
    b = ContextBuilder([tmp_path], tok, options(git=False, index_workspace=False))
    assert not b.counter.exact
    offset = text.index("def f30") + 5
    hist = [Hunk(str(main), "--- a/main.py\n+++ b/main.py\n@@ -1 +1 @@\n-    old\n+    new\n", 1.0)]
    for fn, render in ((b.build_fim, render_fim), (b.build_edit, render_edit)):
        r = fn(str(main), text, offset, hist, budget=budget)
        assert r.report.counting == counting
        assert r.report.verified_by_render == (counting == "render")
        assert len(render(tok, r.prompt).ids) == r.report.total <= budget
        # and the budget is still used: a FIM window cut by the budget leaves up to an eighth of its
        # room free to type into (context.sticky), and snaps to whole functions (~30 tokens here)
        assert budget < 400 or r.report.total > budget * (0.7 if fn == b.build_fim else 0.8)
    b.close()


def test_no_tokenizer_estimates(tmp_path: Path) -> None:
    main = tmp_path / "main.py"
    text = _main_text(60)
    b = ContextBuilder([tmp_path], None, options(git=False, index_workspace=False))
    r = b.build_fim(str(main), text, 100, [], budget=500)
    assert not r.report.exact and r.report.total <= 500
    assert r.prompt.prefix == text[:100][-len(r.prompt.prefix):]
    b.close()


def test_default_budget_and_too_small(tmp_path: Path) -> None:
    main = str(tmp_path / "m.py")
    for budget in (2048, 32768):  # a build that names no budget gets the options' (the server's auto budget)
        b = ContextBuilder([tmp_path], TOK, options(budget=budget, git=False, index_workspace=False))
        assert b.build_fim(main, "x = 1\n", 3, []).report.budget == budget
        assert b.build_fim(main, "x = 1\n", 3, [], budget=1000).report.budget == 1000
        b.close()
    b = ContextBuilder([tmp_path], TOK, options(git=False, index_workspace=False))
    with pytest.raises(ValueError, match="budget"):
        b.build_fim(main, "x = 1\n", 3, [], budget=5)
    b.close()


def _gpt2_style_tokenizer() -> Tokenizer:
    """Byte-level BPE with the GPT-2 pre-tokenizer regex and merges of newline / space runs: not
    additive per line ("\\n" + indentation merge), additive per block (like SmolLM2's tokenizer)."""
    from tokenizers import Tokenizer as HF
    from tokenizers import decoders, models, pre_tokenizers

    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    vocab = {ch: i for i, ch in enumerate(alphabet)}
    merges = [("Ċ", "Ċ"), ("Ġ", "Ġ"), ("ĠĠ", "ĠĠ"), ("ĊĊ", "Ċ"), ("d", "e"), ("de", "f")]
    for a, b in merges:
        vocab[a + b] = len(vocab)
    vocab["<|endoftext|>"] = len(vocab)
    hf = HF(models.BPE(vocab=vocab, merges=merges))
    hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    hf.decoder = decoders.ByteLevel()
    hf.add_special_tokens(["<|endoftext|>"])
    return Tokenizer.with_special_tokens(hf, eos_token="<|endoftext|>")


def test_block_counting_is_exact_for_gpt2_style_bpe(tmp_path: Path) -> None:
    tok = _gpt2_style_tokenizer()
    main = tmp_path / "main.py"
    text = _main_text(80) + "\n\n\nclass Tail:\n\n    def m(self):\n        return 1\n"
    main.write_text(text)
    b = ContextBuilder([tmp_path], tok, options(git=False, index_workspace=False))
    assert not b.counter.exact and b.counter.exact_text
    for budget in (100, 333, 1000, 2500):
        for frac in (0.0, 0.13, 0.5, 0.77, 1.0):
            offset = int(len(text) * frac)
            for fn, render in ((b.build_fim, render_fim), (b.build_edit, render_edit)):
                r = fn(str(main), text, offset, [], budget=budget)
                assert r.report.counting == "blocks" and not r.report.verified_by_render
                assert len(render(tok, r.prompt).ids) == r.report.total <= budget, (budget, frac, fn.__name__)
    b.close()


@pytest.mark.parametrize("tokenizer", ["byte", "gpt2"])
def test_exact_after_keystrokes(tmp_path: Path, tokenizer: str) -> None:
    """Incremental line/count updates (didChange edits) keep the counts exact."""
    import random

    tok = TOK if tokenizer == "byte" else _gpt2_style_tokenizer()
    main = str(tmp_path / "main.py")
    text = _main_text(40)
    b = ContextBuilder([tmp_path], tok, options(git=False, index_workspace=False))
    b.update_document(main, text, 1)
    rng = random.Random(7)
    for version in range(2, 30):
        start = rng.randrange(len(text))
        old = text[start:start + rng.choice([0, 1, 5])]
        new = rng.choice(["x", "\n", "\n\ndef g():\n    pass\n", "", "    "])
        text = text[:start] + new + text[start + len(old):]
        b.update_document(main, text, version, [(start, old, new)])
        if version % 2:
            continue
        cursor = min(len(text), start + len(new))
        for fn, render in ((b.build_fim, render_fim), (b.build_edit, render_edit)):
            r = fn(main, text, cursor, [], budget=700)
            assert len(render(tok, r.prompt).ids) == r.report.total <= 700
    assert b.docs[main].reparsed_fully == 0
    b.close()


def test_a_next_edit_keeps_its_trained_history_on_a_small_budget(ws, tmp_path: Path) -> None:
    """A 1,024-token prompt (the CPU's auto budget) holds the last three edits a next edit is trained on
    (`budget.EDIT_SHARES`: history first); with FIM's shares the same build kept one of them."""
    from edit_server.context.budget import Shares

    b, main, text = ws
    lines = text.splitlines(keepends=True)
    hist = []
    for i, at in enumerate((20, 60, 100)):  # three hunks of ~110 tokens each, this file's
        old = "".join(lines[at:at + 3])
        hist.append(Hunk(str(main), f"--- a/main.py\n+++ b/main.py\n@@ -{at + 1},3 +{at + 1},3 @@\n"
                                    + "".join(f"-{ln}" for ln in lines[at:at + 3])
                                    + "".join(f"+{ln}" for ln in old.replace("helper", f"helper{i}").splitlines(True)),
                         float(i)))
    cost = sum(len(TOK.encode(h.diff)) for h in hist)
    assert 300 < cost < 550
    offset = text.index("def f30")
    r = b.build_edit(str(main), text, offset, hist, budget=1024, max_history=3)
    assert r.prompt.history == tuple(h.diff for h in hist) and r.report.total <= 1024
    assert r.prompt.before and r.prompt.after  # the file around the region still fills the rest
    fim_like = ContextBuilder([tmp_path], TOK, options(edit_shares=Shares()))
    try:
        old = fim_like.build_edit(str(main), text, offset, hist, budget=1024, max_history=3)
    finally:
        fim_like.close()
    assert len(old.prompt.history) < 3
