"""Quick FIM prompts after a jump (edit_server.context.quick): the served head byte for byte, a short window
around the new cursor that stays put while the user types in it, nothing kept across new options."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from edit_server.context import ContextBuilder
from edit_server.context.quick import QUICK_MIN
from engine.templates import render_fim
from engine.textdiff import common_prefix as _lcp
from tests.context_util import TOK, indexed_workspace


@pytest.fixture
def ws(tmp_path: Path) -> Iterator[tuple[ContextBuilder, str, str]]:
    b, path, text = indexed_workspace(tmp_path)
    yield b, path, text
    b.close()


def test_a_quick_prompt_keeps_the_served_head_and_computes_a_short_window(ws) -> None:
    b, path, text = ws
    here = text.index("def f30") + len("def f30(x):\n    y = ")
    assert b.quick_fim(path, text, here, 64, budget=700) is None  # nothing served yet: no head to reuse
    served = b.build_fim(path, text, here, [], budget=700)
    assert served.prompt.sections  # the definitions of helper / Thing
    b.served_fim(path, served)
    far = text.index("def f3(") + len("def f3(x):\n    y = ")  # outside the 700-token window around f30
    full = b.build_fim(path, text, far, [], budget=700)
    assert not full.report.sticky
    quick = b.quick_fim(path, text, far, 64, budget=700)
    assert quick is not None and quick.report.quick and not quick.report.sticky
    assert quick.prompt.sections == served.prompt.sections and quick.prompt.history == served.prompt.history
    assert quick.prompt.prefix.endswith("def f3(x):\n    y = ")
    old, new, whole = (render_fim(TOK, p).ids for p in (served.prompt, quick.prompt, full.prompt))
    assert len(new) == quick.report.total
    head = len(render_fim(TOK, served.prompt).ids) - len(TOK.encode(served.prompt.prefix + served.prompt.suffix))
    computed = len(new) - _lcp(old, new)  # what the prefix cache lacks: the new window (and the markers)
    assert QUICK_MIN // 2 <= quick.report.window.used <= 2 * 64
    assert computed <= quick.report.window.used + 8 < len(whole) - _lcp(old, whole)
    assert _lcp(old, new) >= head - 8


def test_typing_in_a_quick_window_keeps_its_lines(ws) -> None:
    b, path, text = ws
    here = text.index("def f30") + len("def f30(x):\n    y = ")
    b.served_fim(path, b.build_fim(path, text, here, [], budget=700))
    far = text.index("def f3(") + len("def f3(x):\n    y = ")
    b.build_fim(path, text, far, [], budget=700)
    first = b.quick_fim(path, text, far, 64, budget=700)
    assert first is not None
    prev, lines = render_fim(TOK, first.prompt).ids, first.report.window_lines
    for i, ch in enumerate("abc"):
        text = text[:far + i] + ch + text[far + i:]
        b.update_document(path, text, 10 + i)
        q = b.quick_fim(path, text, far + i + 1, 64, budget=700)
        assert q is not None and q.report.sticky and q.report.window_lines == lines
        ids = render_fim(TOK, q.prompt).ids
        assert len(ids) - _lcp(prev, ids) <= 30  # the cursor's line only (its rest, the markers)
        prev = ids


def test_new_options_or_a_closed_document_drop_the_served_head(ws) -> None:
    b, path, text = ws
    here = text.index("def f30") + len("def f30(x):\n    y = ")
    far = text.index("def f3(") + len("def f3(x):\n    y = ")
    b.served_fim(path, b.build_fim(path, text, here, [], budget=700))
    assert b.quick_fim(path, text, far, 64, budget=900) is None  # another budget: another head
    assert b.quick_fim(path, text, far, 64, budget=700) is not None
    b.update_options(exclude=("**/util.py",))  # the head's definitions may come from a now excluded file
    assert b.quick_fim(path, text, far, 64, budget=700) is None
    b.served_fim(path, b.build_fim(path, text, here, [], budget=700))
    b.close_document(path)
    assert b.quick_fim(path, text, far, 64, budget=700) is None
    b.update_document(path, text, 1)
    b.served_fim(path, b.build_fim(path, text, here, [], budget=700))
    b.update_options(exclude=("**/main.py",))
    b.served_fim(path, b.build_fim(path, text, here, [], budget=700))  # blocked: nothing is kept
    assert b.quick_fim(path, text, far, 64, budget=700) is None
