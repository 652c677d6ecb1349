"""After a jump (edit_server.serving.ahead): the worker answers from a quick prompt when the full one's prefill
would not fit half the single-line budget, prefills the full one while its queue is empty, stops that the
moment a request comes, and serves the full prompt once it is cached; a resting cursor is prefilled ahead."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

from edit_server.core.messages import Job
from edit_server.core.requests import FimRequest
from edit_server.core.settings import Settings
from edit_server.serving.worker import EngineWorker
from engine.api import OneByOne
from engine.templates import FimPrompt, render_fim
from engine.textdiff import common_prefix
from engine.types import AbortSignal, EngineInfo, GenerateResult, PrefillPlan
from tests.context_util import TOK

UTIL = ("def helper(a, b):\n    return a * b\n\n\nclass Thing:\n    def grow(self, k):\n        return k\n\n\n"
        "def scale(v, by):\n    return [x * by for x in v]\n")
# the first half of the file calls helper / Thing, the second half scale: other definitions near the cursor
TEXT = "from lib.util import helper, scale, Thing\n" + "".join(
    f"\n\ndef f{i}(x):\n    y = helper(x, {i})\n    return Thing(y).grow({i})\n" if i < 60 else
    f"\n\ndef f{i}(x):\n    y = scale(x, {i})\n    return scale(y, {i})\n" for i in range(120))
MS_PER_TOKEN = 2.0  # the fake's prefill cost: a 2-core CPU's


class CachedFake(OneByOne):
    """An engine whose prefix cache is token lists (the byte-level tokenizer's), per slot key, as the real
    one's: a request's prompt lands in ``key#fim``, a prefetched one in ``key#ahead``."""

    tokenizer, args = TOK, None  # counts as the plan does: byte-level tokens

    def __init__(self, block: bool = False, head_only: bool = False) -> None:
        self.info = EngineInfo(model="cached-fake", device="cpu")
        self.slots: dict[str, list[int]] = {}
        self.served: list[FimPrompt] = []
        self.prefetched: list[FimPrompt] = []
        self.computed: list[int] = []  # tokens each prefetch computed
        self.interrupted = 0
        self.block = block  # prefetch until aborted (a long prefill a request interrupts)
        self.head_only = head_only  # prefetch up to the file window only (a prefetch interrupted there)
        self.lock = threading.Lock()

    def prefill_plan(self, prompt: FimPrompt, cache_key: str) -> PrefillPlan:
        ids = render_fim(TOK, prompt).ids
        with self.lock:
            have = max((common_prefix(s, ids) for k, s in self.slots.items() if k.startswith(cache_key + "#")),
                       default=0)
        todo = len(ids) - min(have, len(ids) - 1)
        return PrefillPlan(len(ids), todo, todo * MS_PER_TOKEN)

    def prefetch(self, prompt: FimPrompt, cache_key: str, abort: AbortSignal | None = None) -> int:
        if self.block:
            t0 = time.monotonic()
            while not (abort is not None and abort.aborted) and time.monotonic() - t0 < 10:
                time.sleep(0.005)
            self.interrupted += 1
            return 0
        ids = render_fim(TOK, prompt).ids
        if self.head_only:
            bare = FimPrompt("", "", prompt.path, prompt.history, prompt.sections, prompt.layout)
            ids = ids[:common_prefix(ids, render_fim(TOK, bare).ids)]
        with self.lock:
            have = max((common_prefix(s, ids) for k, s in self.slots.items() if k.startswith(cache_key + "#")),
                       default=0)
            self.slots[cache_key + "#ahead"] = ids
            self.prefetched.append(prompt)
            self.computed.append(len(ids) - have)
        return len(ids) - have

    def forget(self, cache_key: str | None = None) -> None:
        with self.lock:
            self.slots.clear()

    def infill(self, prompt: FimPrompt, **kw: Any) -> GenerateResult:
        with self.lock:
            self.slots[kw["cache_key"] + "#fim"] = render_fim(TOK, prompt).ids
            self.served.append(prompt)
        return GenerateResult("z", [1], [0.9], 1, 1, 1, 0, "newline")


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "__init__.py").write_text("")
    (tmp_path / "lib" / "util.py").write_text(UTIL)
    (tmp_path / "main.py").write_text(TEXT)
    return tmp_path


def _worker(root: Path, eng: CachedFake) -> EngineWorker:
    """A worker over ``root`` with ``eng``, its workspace indexed (builds see the same sources every time)."""
    w = EngineWorker(lambda s, m: None, roots=[root])
    w.load("cached-fake", "cpu", Settings(), eng)
    assert w.ready.wait(30)
    assert w.settle(60).result(60)
    return w


def _at(root: Path, fn: int, typed: str = "") -> FimRequest:
    text = TEXT
    cur = text.index(f"def f{fn}(x):") + len(f"def f{fn}(x):\n    y = ")
    text = text[:cur] + typed + text[cur:]
    return FimRequest("u", str(root / "main.py"), text, 1, cur + len(typed))


def _ask(w: EngineWorker, req: FimRequest) -> FimPrompt:
    out = w.submit(Job("u", req, Settings(single_line_budget_ms=600))).result(30)
    assert out is not None
    return out.built


def _wait(cond: Any, s: float = 10.0) -> bool:
    t0 = time.monotonic()
    while not cond() and time.monotonic() - t0 < s:
        time.sleep(0.01)
    return bool(cond())


def test_a_jump_is_answered_quick_then_from_the_full_prompt_prefilled_meanwhile(workspace: Path) -> None:
    eng = CachedFake()
    w = _worker(workspace, eng)
    try:
        first = _ask(w, _at(workspace, 100))  # the document's first request: nothing to reuse, the full prompt
        assert first.sections and len(first.prefix) > 400
        assert not eng.prefetched
        quick = _ask(w, _at(workspace, 20))  # a jump: ~1,000 tokens no slot holds
        assert quick.sections == first.sections and quick.history == first.history
        assert quick.prefix.endswith("def f20(x):\n    y = ") and len(quick.prefix) + len(quick.suffix) < 400
        assert eng.prefill_plan(quick, "u").ms <= 300  # half the single-line budget
        assert _wait(lambda: eng.prefetched)  # the queue is empty: the full prompt is prefilled
        full = eng.prefetched[-1]
        assert full.prefix.endswith("def f20(x):\n    y = ") and len(full.prefix) > 400
        assert eng.prefill_plan(full, "u").uncached == 1 and not w._ahead.pending
        typed = _ask(w, _at(workspace, 20, "h"))  # the next keystroke there: the full prompt, cached but its end
        assert typed.sections == full.sections and typed.prefix.endswith("y = h") and len(typed.prefix) > 400
    finally:
        w.stop()
        w.join(5)


def test_a_request_interrupts_a_prefetch_and_the_prompt_waits_on(workspace: Path) -> None:
    eng = CachedFake(block=True)
    w = _worker(workspace, eng)
    try:
        _ask(w, _at(workspace, 100))
        _ask(w, _at(workspace, 20))
        assert _wait(lambda: w._ahead.pending and eng.interrupted == 0)
        time.sleep(0.05)  # the worker is inside the (blocking) prefetch now
        t0 = time.monotonic()
        again = _ask(w, _at(workspace, 20, "h"))
        assert time.monotonic() - t0 < 5  # not the prefetch's 10 s
        assert eng.interrupted >= 1 and again.prefix.endswith("y = h") and len(again.prefix) < 400
        assert w._ahead.pending  # still quick: the full prompt waits for the next idle moment
    finally:
        w.stop()
        w.join(5)


def test_a_resting_cursor_is_prefilled_before_the_user_asks(workspace: Path) -> None:
    eng = CachedFake()
    w = _worker(workspace, eng)
    try:
        _ask(w, _at(workspace, 100))
        w.rest("u", _at(workspace, 60))
        assert _wait(lambda: eng.prefetched)
        assert eng.prefetched[-1].prefix.endswith("def f60(x):\n    y = ")
        asked = _ask(w, _at(workspace, 60))  # cached: the full prompt, at once
        assert asked == eng.prefetched[-1]
        w.rest("u", _at(workspace, 60))
        assert _wait(lambda: len(eng.computed) == 2) and eng.computed == [eng.computed[0], 0]  # all cached
        assert eng.computed[0] > 500
    finally:
        w.stop()
        w.join(5)


def test_a_quick_prompt_takes_the_new_places_context_once_a_prefetch_computed_it(workspace: Path) -> None:
    """A rest prefetch that got through the full prompt's head (this place's definitions) but not its window:
    the quick prompt behind that head costs what the one behind the served head does, and says more."""
    eng = CachedFake(head_only=True)
    w = _worker(workspace, eng)
    try:
        first = _ask(w, _at(workspace, 100))
        w.rest("u", _at(workspace, 20))
        assert _wait(lambda: eng.prefetched)
        full = eng.prefetched[-1]
        assert full.sections != first.sections  # the definitions near f20 are other ones
        quick = _ask(w, _at(workspace, 20))
        assert quick.sections == full.sections and quick.history == full.history
        assert len(quick.prefix) + len(quick.suffix) < 400 and eng.prefill_plan(quick, "u").ms <= 300
    finally:
        w.stop()
        w.join(5)


def test_without_the_served_head_in_the_cache_a_jump_gets_the_full_prompt(workspace: Path) -> None:
    """A quick prompt is a first answer within budget only while its head is cached: evicted (the engine's LRU)
    or forgotten (``clearHistory``, which also drops the served heads), the full prompt is the answer."""
    eng = CachedFake()
    w = _worker(workspace, eng)
    try:
        _ask(w, _at(workspace, 100))
        with eng.lock:
            eng.slots.clear()  # evicted
        evicted = _ask(w, _at(workspace, 20))
        assert len(evicted.prefix) > 400 and not w._ahead.pending
        _ask(w, _at(workspace, 100))
        w.forget()
        forgot = _ask(w, _at(workspace, 20))
        assert len(forgot.prefix) > 400 and not w._ahead.pending
        assert len(_ask(w, _at(workspace, 100)).prefix) < 400  # cached again: quick
    finally:
        w.stop()
        w.join(5)
