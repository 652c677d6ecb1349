"""Pipeline (skip rules, edit diffs), suggestion cache, feedback store and the engine worker
(supersede, abort, batching) with the real tiny-random engine."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

from edit_server.core.messages import Configure, Job
from edit_server.core.requests import EditRequest, FimRequest, TextEdit
from edit_server.core.settings import Settings
from edit_server.selectivity.feedback import FeedbackStore
from edit_server.selectivity.select import diff_edits, skip_reason
from edit_server.serving import contexts
from edit_server.serving.contexts import auto_budget, make_context
from edit_server.serving.suggest_cache import SuggestCache
from edit_server.serving.worker import EngineWorker
from engine.api import EngineAPI, OneByOne
from engine.types import EngineInfo, GenerateResult


def apply(text: str, edits: list[TextEdit]) -> str:
    for e in sorted(edits, key=lambda e: e.start, reverse=True):
        text = text[: e.start] + e.text + text[e.end :]
    return text


@pytest.mark.parametrize(("old", "new"), [
    ("a = 1\nb = 2\nc = 3\n", "a = 1\nb = 20\nc = 3\n"),
    ("a\nb\nc\nd\n", "a\nc\nd\nx\n"),  # deletion + insertion elsewhere: several hunks
    ("x\n", "x\n"),
    ("def f(w):\n    return w\n", "def f(w, h):\n    return w * h\n"),
])
def test_diff_edits_apply_back(old: str, new: str) -> None:
    edits = diff_edits(old, new, 10)
    assert apply("#" * 10 + old, edits) == "#" * 10 + new
    assert all(a.end <= b.start for a, b in zip(edits, edits[1:], strict=False))
    if old == new:
        assert edits == []


def test_character_refinement() -> None:
    [e] = diff_edits("return w * w\n", "return w * h\n", 0)
    assert (e.start, e.end, e.text) == (11, 12, "h")


def test_skip_rules() -> None:
    s = Settings()
    req = FimRequest("u", "/a.py", "foo = bar_baz_qux(1)\n", 1, 2, invoked=False)
    assert skip_reason(req, s) == "auto-trigger rule"  # mid-word
    req.invoked = True
    assert skip_reason(req, s) is None
    s.inline_completion.enabled = False
    assert skip_reason(req, s) == "disabled"


def test_context_fails_closed_and_reports_degraded() -> None:
    ctx = make_context(Settings(), [Path("/w/\x00bad")], None)  # an unusable workspace root
    assert ctx.degraded and "current document" in ctx.degraded
    assert ctx.fim(FimRequest("u", "/w/.env", "KEY=1\n", 1, 0)) is None  # exclusions still apply
    key = "AKIA" + "IOSFODNN7EXAMPLE"
    p = ctx.fim(FimRequest("u", "/w/a.py", f"x = 1\nAWS = '{key}'\ny = \n", 1, 5))
    assert p is not None and key not in p.prefix + p.suffix and "x = 1" in p.prefix


def test_exclude_change_reaches_the_builder(tmp_path: Path) -> None:
    ctx = make_context(Settings(), [tmp_path], None)
    assert ctx.degraded is None
    req = FimRequest("u", str(tmp_path / "q.sql"), "select 1;\n", 1, 7)
    assert ctx.fim(req) is not None
    ctx.configure(Settings(exclude=["**/*.sql"]), None)
    assert ctx.fim(req) is None


def test_suggest_cache_rebases_while_typing() -> None:
    c = SuggestCache()
    doc = "x = \nend\n"
    c.put("u", "s1", "foo(1)", doc, 4, 0.7)
    typed = "x = fo\nend\n"
    entry, rest = c.lookup("u", typed, 6)
    assert entry.id == "s1" and rest == "o(1)"
    assert c.lookup("u", "x = fa\nend\n", 6) is None  # typed something else
    assert c.lookup("u", typed, 5) is None  # cursor elsewhere
    assert c.lookup("u", "x = foo(1)\nend\n", 10) is None  # fully typed: nothing left
    assert c.still_valid("u", typed) and not c.still_valid("u", "y" + typed)


def test_feedback_store_signals() -> None:
    fb = FeedbackStore(":memory:", ttl_s=10)
    fb.offered("a", "fim", "u", 0.9)
    fb.offered("b", "fim", "u", 0.4)
    fb.offered("c", "edit", "v", 0.6)
    fb.shown("a"), fb.shown("b"), fb.shown("c")
    fb.partial("a", 3)
    fb.accepted("a")
    fb.typed_over("u")  # b was shown and typed over -> rejected; a already accepted
    fb.expire(now=time.monotonic() + 60)  # c outlived its ttl
    assert fb.events("a") == ["shown", "partial", "accepted"]
    assert fb.events("b") == ["shown", "rejected"]
    assert fb.events("c") == ["shown", "expired"]
    assert fb.counts() == {"shown": 3, "partial": 1, "accepted": 1, "rejected": 1, "expired": 1}
    fb.offered("d", "fim", "u", 0.5)
    fb.offered("e", "edit", "u", 0.7)
    fb.shown("d"), fb.shown("e")
    fb.typed_over("u", reason="replaced", kind="fim")  # a new completion replaces the shown completion only
    assert fb.events("d") == ["shown", "rejected"]
    fb.accepted("e", "edit", "u")  # the next edit shown beside it is still there to accept
    assert fb.events("e") == ["shown", "accepted"]


class Recorder:
    def __init__(self) -> None:
        self.states: list[tuple[str, str]] = []
        self.ready = threading.Event()

    def __call__(self, state: str, msg: str) -> None:
        self.states.append((state, msg))


@pytest.fixture(scope="module")
def worker() -> Any:
    rec = Recorder()
    w = EngineWorker(rec)
    w.load("tiny-random", "cpu", Settings())
    assert w.ready.wait(60), rec.states
    w.rec = rec
    yield w
    w.stop()
    w.join(5)


def _fim(uri: str) -> Job:
    text = "def add(a, b):\n    return \n"
    return Job(uri, FimRequest(uri, "/w/a.py", text, 1, len(text) - 1), Settings(max_tokens=16))


def test_worker_runs_fim_and_edit(worker: Any) -> None:
    out = _fim("u1")
    res = worker.submit(out).result(30)
    assert res is not None and res.result.prompt_tokens > 0 and len(res.confidences) == len(res.result.tokens)
    text = "def f(w):\n    return w\n"
    ej = Job("u1", EditRequest("u1", "/w/a.py", text, 1, 5), Settings())
    er = worker.submit(ej).result(30)
    assert er is not None and er.built.region_start == 0
    assert ("loading", "loading model 'tiny-random' on cpu") in worker.rec.states
    assert worker.rec.states[-1][0] == "ready"


def test_worker_supersede_and_batching(worker: Any) -> None:
    # block the worker with a job so the next ones queue up together
    gate = threading.Event()
    worker._q.put(Configure(Settings()))
    orig = worker._command

    def blocking(item: Any) -> None:
        gate.wait(10)
        orig(item)

    worker._command = blocking
    try:
        older, newer, other = _fim("doc"), _fim("doc"), _fim("doc2")
        f_old = worker.submit(older)
        f_new = worker.submit(newer)  # supersedes `older` (same document, same kind)
        f_other = worker.submit(other)
        assert older.abort.aborted and not newer.abort.aborted and not other.abort.aborted
    finally:
        worker._command = orig
        gate.set()
    assert f_old.result(30) is None
    r_new, r_other = f_new.result(30), f_other.result(30)
    assert r_new is not None and r_other is not None
    assert r_new.batch == r_other.batch == 2  # queued together -> one batched engine call


class Broken(OneByOne):
    tokenizer = None
    info = EngineInfo()

    def complete(self, *a: Any, **k: Any) -> Any:
        raise RuntimeError("boom")


def test_engine_failure_and_bad_model_are_reported_not_fatal(worker: Any) -> None:
    rec = Recorder()
    w = EngineWorker(rec)
    try:
        w.load("/nonexistent/model.gguf", "cpu", Settings())
        job = _fim("x")
        assert w.submit(job).result(60) is None  # not loaded: empty answer
        assert rec.states[-1][0] == "error" and "/nonexistent/model.gguf" in rec.states[-1][1]
        w.engine, w._ctx = Broken(), make_context(Settings(), [], None)
        with pytest.raises(RuntimeError, match="boom"):
            w.submit(_fim("x")).result(30)
        with pytest.raises(RuntimeError):  # the worker thread is still alive and serving
            w.submit(_fim("y")).result(30)
    finally:
        w.stop()
        w.join(5)


class Lifecycle(OneByOne):
    """An engine using the typed contract's members besides the calls: meta, degraded, close."""

    tokenizer, args = None, None

    def __init__(self) -> None:
        self.info = EngineInfo(model="lifecycle", device="cpu")
        self.meta = {"revision": "0123abc"}
        self.failure: str | None = None
        self.closed = 0

    @property
    def degraded(self) -> str | None:
        return self.failure

    def close(self) -> None:
        self.closed += 1

    def infill(self, prompt: Any, **kw: Any) -> GenerateResult:
        return GenerateResult("x", [1], [0.9], 1, 1, 1, 0, "eom")

    def rewrite(self, prompt: Any, **kw: Any) -> GenerateResult:
        return GenerateResult(prompt.region, [1], [0.9], 1, 1, 1, 0, "eom")


def test_worker_uses_the_engines_meta_degraded_and_close() -> None:
    """The worker reads the revision from ``meta``, shows ``degraded`` as its status and closes an engine
    it replaces or stops with (EngineAPI members, defaults in EngineBase: in-process engines do nothing)."""
    assert isinstance(Lifecycle(), EngineAPI)
    assert (Broken().meta, Broken().degraded, Broken().close()) == ({}, None, None)
    rec = Recorder()
    w = EngineWorker(rec)
    first, second = Lifecycle(), Lifecycle()
    try:
        w.load("x", "cpu", Settings(), first)
        assert w.ready.wait(30)
        first.failure = "remote timed out"
        assert w.submit(_fim("a")).result(30) is not None  # after the load's last step (one thread)
        assert first.info.revision == "0123abc" and rec.states[-1] == ("degraded", "remote timed out")
        assert ("ready", "lifecycle () on cpu") in [(st, m.partition(", loaded in")[0]) for st, m in rec.states]
        first.failure = None
        assert w.submit(_fim("a")).result(30) is not None and rec.states[-1] == ("ready", "idle")
        w.load("x", "cpu", Settings(), second)
        assert w.ready.wait(30) and (first.closed, second.closed) == (1, 0)
    finally:
        w.stop()
        w.join(5)
    assert second.closed == 1


def test_auto_budget_follows_model_and_device() -> None:
    from types import SimpleNamespace

    def eng(device: str, ctx: int) -> SimpleNamespace:
        return SimpleNamespace(args=SimpleNamespace(max_seq_len=ctx), info={"device": device})

    auto = Settings()
    assert auto.context_budget == 0
    # GPU: the model's context (capped at 32,768) minus room for the canvas
    assert auto_budget(auto, eng("cuda:0", 8192)) == 8192 - contexts.CANVAS_RESERVE
    assert auto_budget(auto, eng("cuda:0", 131072)) == 32768 - contexts.CANVAS_RESERVE
    # CPU: capped so a cold prefill stays interactive
    assert auto_budget(auto, eng("cpu", 8192)) == contexts.CPU_AUTO_BUDGET == 1024
    # an explicit setting wins
    assert auto_budget(Settings(context_budget=300), eng("cuda:0", 8192)) == 300
    assert auto_budget(Settings(context_budget=300), eng("cpu", 8192)) == 300


def test_batched_jobs_equal_each_job_alone(worker: Any) -> None:
    """Cross-request batching (several documents in flight, FIM and edit mixed) changes no output."""
    texts = ["def add(a, b):\n    return \n", "class A:\n    def f(self):\n        \n", "x = [1, 2, 3]\ny = \n"]
    edit_text = "def f(w):\n    return w * w\n"

    def jobs() -> list[Job]:
        out: list[Job] = [Job(f"doc{i}", FimRequest(f"doc{i}", f"/w/d{i}.py", t, 1, len(t) - 1),
                              Settings(max_tokens=16, multiline_budget_ms=60_000,
                                       single_line_budget_ms=60_000))  # no time cut: exact
                         for i, t in enumerate(texts)]
        out.append(Job("edit", EditRequest("edit", "/w/e.py", edit_text, 1, 12), Settings()))
        return out

    for j in jobs():  # every document known to the context builder first: the prompts are then fixed
        assert worker.submit(j).result(60) is not None
    gate = threading.Event()
    orig = worker._command

    def blocking(item: Any) -> None:
        gate.wait(10)
        orig(item)

    worker._command = blocking
    worker._q.put(Configure(Settings()))  # holds the worker thread while the jobs queue up behind it
    try:
        together = [worker.submit(j) for j in jobs()]
    finally:
        worker._command = orig
        gate.set()
    batched = [f.result(60) for f in together]
    assert [b.batch for b in batched] == [4, 4, 4, 4]
    alone = [worker.submit(j).result(60) for j in jobs()]
    assert [a.batch for a in alone] == [1, 1, 1, 1]
    assert [b.result.prompt_tokens for b in batched] == [a.result.prompt_tokens for a in alone]
    assert [b.result.tokens for b in batched] == [a.result.tokens for a in alone]
    assert [b.text for b in batched] == [a.text for a in alone]
    assert all(len(b.result.tokens) > 0 for b in batched)


def test_feedback_writes_never_wait_for_the_disk(tmp_path: Path) -> None:
    """The writer thread owns the connection: with it stuck (a slow disk), logging events returns at
    once; an accept's future completes only once the event is committed."""
    fb = FeedbackStore(tmp_path / "fb.sqlite3", ttl_s=10)
    stuck = threading.Event()
    fb._writer.call(lambda db: stuck.wait(30))  # the "disk" hangs
    fb.offered("a", "fim", "u", 0.9)
    fb.shown("a")
    fb.typed_over("other")
    done = fb.accepted("a")
    assert not done.done()  # not acknowledged while not on disk
    stuck.set()
    done.result(10)
    assert fb.events("a") == ["shown", "accepted"]
    fb.close()
    import sqlite3

    rows = sqlite3.connect(tmp_path / "fb.sqlite3").execute("SELECT event FROM events").fetchall()
    assert [r[0] for r in rows] == ["shown", "accepted"]  # committed, visible to another connection


def test_a_full_feedback_queue_drops_events_without_waiting(tmp_path: Path, monkeypatch) -> None:
    """With the disk stuck and the bounded queue full, an event is dropped at once (its future fails):
    the loop never waits (it waited 5 s per event)."""
    from edit_server.selectivity import dbwriter

    monkeypatch.setattr(dbwriter, "QUEUE_LIMIT", 3)
    fb = FeedbackStore(tmp_path / "fb.sqlite3", ttl_s=10)
    stuck, held = threading.Event(), threading.Event()
    fb._writer.call(lambda db: (held.set(), stuck.wait(30)))
    assert held.wait(10)  # the writer holds the stuck call; fill the queue behind it
    for _ in range(3):
        fb._writer.call(lambda db: None)
    t0 = time.perf_counter()
    done = fb.accepted("a", "fim", "u", 0.9)
    assert time.perf_counter() - t0 < 0.5 and isinstance(done.exception(0), RuntimeError)
    stuck.set()
    fb.close()


def test_a_command_drained_with_a_batch_runs_before_later_requests(tmp_path: Path) -> None:
    """Workspace folders changed while the worker was busy: the request queued after the change is built
    with the new folders (a command met while draining a batch is not put behind later requests)."""
    from edit_server.core.messages import SetRoots

    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    rec = Recorder()
    w = EngineWorker(rec, [a])
    w.load("tiny-random", "cpu", Settings())
    assert w.ready.wait(60), rec.states
    gate = threading.Event()
    orig = w._command
    order: list[str] = []

    def blocking(item: Any) -> None:
        gate.wait(10)
        order.append(type(item).__name__)
        orig(item)

    text = "def add(a, b):\n    return \n"

    def job(path: Path) -> Job:
        return Job(str(path), FimRequest(str(path), str(path), text, 1, len(text) - 1), Settings(max_tokens=4))

    try:
        w._command = blocking
        w._q.put(Configure(Settings()))  # the worker waits in here
        first = w.submit(job(a / "x.py"))
        w._q.put(SetRoots((b,), (a,)))
        later = w.submit(job(a / "y.py"))  # sent after folder a was removed
        gate.set()
        assert first.result(30) is not None
        assert later.result(30) is None  # outside every folder now: not built, no model call
        assert order == ["Configure", "SetRoots"] and w.roots == [b]
    finally:
        w._command = orig
        gate.set()
        w.stop()
        w.join(5)


class Forgetful(Lifecycle):
    def __init__(self) -> None:
        super().__init__()
        self.forgot: list[str | None] = []

    def forget(self, cache_key: str | None = None) -> None:
        self.forgot.append(cache_key)


def test_closing_a_document_and_clearing_history_free_the_engines_cache() -> None:
    from edit_server.serving.pipeline import Pipeline

    eng = Forgetful()
    p = Pipeline(Settings(), Recorder(), [], engine=eng)
    try:
        assert p.worker.ready.wait(30)
        p.open_document("file:///w/a.py", "/w/a.py", "x = 1\n", 1, "python")
        p.close_document("file:///w/a.py")
        p.clear_history()
        deadline = time.monotonic() + 10
        while len(eng.forgot) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert eng.forgot == ["file:///w/a.py", None]
    finally:
        p.worker.stop()
        p.worker.join(5)
    from engine.engine import Engine

    tiny = Engine.load("tiny-random", device="cpu")
    for key in ("doc1", "doc2"):
        tiny.infill(_fim_prompt(), max_tokens=4, cache_key=key)
    assert len(tiny.cache) == 2
    tiny.forget("doc1")
    assert len(tiny.cache) == 1 and "doc2#fim" in tiny.cache
    tiny.forget()
    assert len(tiny.cache) == 0


def _fim_prompt() -> Any:
    from engine.templates import FimPrompt

    return FimPrompt("def add(a, b):\n    return ", "\n", path="a.py")
