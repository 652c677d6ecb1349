"""Edit prompt layouts: history before the file (the shipped adapter's) or after it (cache-friendly)."""

from __future__ import annotations

import pytest

from engine.formats import for_model
from engine.templates import DEFAULT_EDIT_LAYOUT, EditPrompt, render_edit
from engine.tokenizer import Tokenizer

TOK = Tokenizer.byte_level()
P = EditPrompt("import os\n\n", "x = 1\ny = 2\n", "print(x)\n", 5, path="m.py",
               history=("--- a/m.py\n+++ b/m.py\n@@ -1 +1 @@\n-x = 0\n+x = 1\n",))


def _labels(p: EditPrompt) -> list[str]:
    return [label for label, _, _ in render_edit(TOK, p).parts]


def test_layout_orders() -> None:
    assert DEFAULT_EDIT_LAYOUT == "history-file"
    assert _labels(P) == ["history", "header", "after", "before", "region", "middle"]
    fh = EditPrompt(**{**P.__dict__, "layout": "file-history"})
    assert _labels(fh) == ["header", "after", "before", "history", "region", "middle"]
    a, b = render_edit(TOK, P).ids, render_edit(TOK, fh).ids
    assert sorted(a) == sorted(b) and a != b  # the same pieces, another order
    with pytest.raises(ValueError, match="edit layout 'sideways'"):
        render_edit(TOK, EditPrompt(**{**P.__dict__, "layout": "sideways"}))


def test_file_history_reprefills_only_history_and_region() -> None:
    """The next request after one more edit in the region: file-history shares everything up to the history."""
    nxt = EditPrompt(P.before, "x = 1\ny = 3\n", P.after, 11, path="m.py",
                     history=(*P.history, "--- a/m.py\n+++ b/m.py\n@@ -2 +2 @@\n-y = 2\n+y = 3\n"))

    def shared(layout: str) -> tuple[int, int]:
        a = render_edit(TOK, EditPrompt(**{**P.__dict__, "layout": layout})).ids
        b = render_edit(TOK, EditPrompt(**{**nxt.__dict__, "layout": layout}))
        n = 0
        while a[n] == b.ids[n]:
            n += 1
        start = {label: s for label, s, _ in b.parts}
        return n, start["history"] if layout == "file-history" else start["header"]

    n, hist = shared("file-history")
    assert n >= hist  # the whole file part is reused
    n, header = shared("history-file")
    assert n < header  # the history changed before the file: the file is prefilled again


def test_the_adapter_metadata_names_the_layout() -> None:
    block = 16
    default = for_model(TOK, {}, block_size=block).edit(P)
    assert default.before == render_edit(TOK, P).ids  # no edit_layout: behaviour unchanged
    named = for_model(TOK, {"edit_layout": "file-history"}, block_size=block).edit(P)
    assert named.before == render_edit(TOK, EditPrompt(**{**P.__dict__, "layout": "file-history"})).ids


def test_engine_info_names_the_history_its_prompts_were_trained_with() -> None:
    """Our format: the adapter's ``edit_history``, else what our trainer renders; another model's format
    says nothing (the server then shows ``historySize`` diffs)."""
    from engine.templates import EDIT_HISTORY
    from tests.dllm_util import tiny_engine

    assert EDIT_HISTORY == 3
    assert tiny_engine(None).info["edit_history"] == EDIT_HISTORY
    assert tiny_engine({"edit_history": 5}).info["edit_history"] == 5
    assert tiny_engine({"registry": "Dream-org/Dream-Coder-v0-Base-7B"}).info["edit_history"] is None
