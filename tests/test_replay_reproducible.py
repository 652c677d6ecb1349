"""Replays are reproducible case by case: the same case gives the same prompt whatever the workspace's
temporary directory, the timing of the builder's background work or the pace of the replayed edits, and
two runs of the same cases through the real server give the same prompts and suggestions."""

from __future__ import annotations

import subprocess
import threading
from pathlib import Path

import pytest

from edit_server.context import ContextBuilder
from edit_server.core.documents import EditEvent
from edit_server.core.history import EditHistory
from edit_server.serving.contexts import prompt_digest
from engine.git_history import extract_sessions, git_env, states_of
from engine.textdiff import changed_span
from evals.replay_sessions import SessionReplayOptions, session_case
from tests.context_util import TOK, options

FAR = "def helper(a, b):\n    return a * b + 7\n\n\n" + "".join(f"X{i} = {i}\n" for i in range(120))
NEAR = "\n\ndef main():\n    total = helper(2, 3)\n    return total\n"


def _event(path: str, old: str, new: str, t: float) -> EditEvent:
    p, e_old, e_new = changed_span(old, new)
    return EditEvent(path, p, e_old, old[p:e_old], new[p:e_new], t, old, new)


def _edit_prompt(root: Path, budget: int = 4000) -> tuple[str, tuple[str, ...]]:
    """An edit prompt of ``root/pkg/m.py`` after two recorded edits (the path as a server sees it)."""
    path = str(root / "pkg" / "m.py")
    v0 = FAR + NEAR
    v1 = v0.replace("helper(2, 3)", "helper(2, 4)")
    v2 = v1.replace("return total", "return total + 1")
    hist = EditHistory(pause_s=0.0)
    hist.record(_event(path, v0, v1, 1.0))
    hist.record(_event(path, v1, v2, 1.0))
    b = ContextBuilder([root], TOK, options(git=False))
    try:
        built = b.build_edit(path, v2, v2.index("+ 1"), hist.recent(6), budget=budget)
    finally:
        b.close()
    return prompt_digest(built.prompt), built.prompt.history


def test_history_in_prompts_names_the_workspace_relative_path(tmp_path: Path) -> None:
    a, b = tmp_path / "run-a", tmp_path / "other-run-b"
    a.mkdir()
    b.mkdir()
    digest_a, hist_a = _edit_prompt(a)
    digest_b, hist_b = _edit_prompt(b)
    assert len(hist_a) == 2  # pause 0: one hunk per edit, though both came at the same instant
    for d in hist_a:
        assert d.startswith("--- a/pkg/m.py\n+++ b/pkg/m.py\n") and str(tmp_path) not in d
    assert hist_a == hist_b and digest_a == digest_b  # another temporary directory, the same prompt


def _blocked(b: ContextBuilder) -> threading.Event:
    """Hold the builder's background thread until the returned event is set."""
    go = threading.Event()
    b._submit(go.wait, 30)
    return go


def _definitions(b: ContextBuilder, path: str, text: str) -> list[str]:
    built = b.build_edit(path, text, text.index("helper(2"), budget=400)
    return [s.text for s in built.prompt.sections if s.kind == "definition"]


def test_settle_makes_the_build_independent_of_background_timing(tmp_path: Path) -> None:
    path, text = str(tmp_path / "m.py"), FAR + NEAR  # open in the editor only (not on disk, not scanned)
    b = ContextBuilder([tmp_path], TOK, options(git=False))
    try:
        assert b.wait_idle(30)
        go = _blocked(b)  # a busy background thread: the document's definitions are not indexed yet
        assert _definitions(b, path, text) == []  # what a racing build gets: helper() is missing
        go.set()
        assert b.wait_idle(30)
        assert any(d.startswith("def helper") for d in _definitions(b, path, text))  # ... and later, not
    finally:
        b.close()
    b = ContextBuilder([tmp_path], TOK, options(git=False))
    try:
        go = _blocked(b)
        threading.Timer(0.3, go.set).start()
        assert b.settle(path, text, timeout=30)  # waits for the busy thread and the document's extraction
        assert b.settled
        assert any(d.startswith("def helper") for d in _definitions(b, path, text))
    finally:
        b.close()


def test_history_pause_zero_keeps_every_change_its_own_hunk() -> None:
    t0 = "a = 1\nb = 2\n"
    t1, t2 = t0.replace("1", "3"), t0.replace("1", "3").replace("2", "4")
    for pause, hunks in ((0.0, 2), (1.0, 1)):
        h = EditHistory(pause_s=pause)
        h.record(_event("m.py", t0, t1, 5.0))
        h.record(_event("m.py", t1, t2, 5.0))  # the same instant: merged only when a pause is set
        assert len(h) == hunks


def test_identifiers_near_the_cursor_come_in_one_order() -> None:
    """The definitions in a prompt follow these names: tree-sitter's captures came back in another order
    at every call (20 orders in 20 calls here), so the same build gave other definitions."""
    from edit_server.context.symbols import identifiers_near
    from edit_server.context.syntax import Document

    js = "".join(f"const v{i} = (a{i}, b{i}) => fetch(a{i}, {{timeout: b{i}, hooks: h{i}}});\n" for i in range(40))
    py = "".join(f"x{i} = call{i}(alpha{i}, beta{i}) + gamma{i}.delta{i}\n" for i in range(40))
    for name, text in (("m.js", js), ("m.py", py)):
        got = set()
        for _ in range(20):
            d = Document.open(f"/w/{name}", text, 1)
            got.add(tuple(identifiers_near(d.lang, d.tree, d.lines, 20)))
        (names,) = got
        assert names[:2] == (("v20", "a20") if name == "m.js" else ("x20", "call20"))  # the cursor's row, in text order
        assert names.index("a19") < names.index("a21") if name == "m.js" else names.index("x19") < names.index("x21")


NAMES = ("m.py", "n.py", "o.py")
V1 = "".join(f"def f{i}(x):\n    return x + {i}\n\n\n" for i in range(30))


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    r = tmp_path_factory.mktemp("held")

    def git(*args: str) -> None:
        subprocess.run(["git", "-C", str(r), "-c", "user.name=t", "-c", "user.email=t@e", "-c",
                        "core.hooksPath=/dev/null", "-c", "commit.gpgsign=false", *args], check=True,
                       capture_output=True, env=git_env())

    git("init", "-q", "-b", "main")
    for name in NAMES:
        (r / name).write_text(V1)
    git("add", "-A")
    git("commit", "-q", "-m", "one")
    v2 = V1.replace("x + 2\n", "x * 2\n").replace("x + 3\n", "x * 3\n").replace("x + 25\n", "x * 25\n")
    for name in NAMES:
        (r / name).write_text(v2.replace("def f4(", f"def f4_{name[0]}("))  # each file a bit different
    git("commit", "-q", "-am", "two")
    return r


def _run(cases: list, out: Path) -> dict[str, dict]:
    from evals.runners import CaseRunner, run_cases
    from evals.store import ResultStore

    store = ResultStore(out, {"kind": "test"}, fresh=True)
    ws = out / "ws"
    runner = CaseRunner(model="tiny-random", device="cpu", root=ws, log_path=out / "server.log", gate=False,
                        threshold=None, timeout=120, restart_every=0,
                        init_extra={"feedbackDb": ":memory:", "maxTokens": 8, "contextBudget": 512})
    run_cases(cases, store, runner)
    assert not any(ws.glob("*/*.py"))  # every case's files went with it
    return store.records


@pytest.mark.e2e
def test_two_runs_of_the_same_cases_give_the_same_prompts_and_suggestions(repo: Path, tmp_path: Path) -> None:
    sessions = sorted((s for s in extract_sessions(repo, trim=False)), key=lambda s: s.path)
    cases = [session_case(s, k, states_of(s), SessionReplayOptions()) for s in sessions for k in (1, 2)]
    first, second = _run(cases, tmp_path / "a"), _run(cases, tmp_path / "b")
    assert set(first) == set(second) == {c.id for c in cases}
    for cid, rec in first.items():
        assert rec["error"] is None and rec["prompt_digest"], rec
        assert "history=" in rec["prompt_digest"]
        assert second[cid]["prompt_digest"] == rec["prompt_digest"], cid
        assert second[cid]["suggestion"] == rec["suggestion"], cid
    # the cases of one file share its name but never each other's files: k=2 prompts are not k=1's
    assert len({r["prompt_digest"] for r in first.values()}) == len(cases)
    from evals.store import compare_runs

    assert compare_runs(tmp_path / "a", tmp_path / "b") == (len(cases), [])


def test_compare_runs_names_what_differs(tmp_path: Path) -> None:
    import json

    from evals.store import compare_runs

    def run(name: str, recs: list[dict]) -> Path:
        d = tmp_path / name
        d.mkdir()
        (d / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs) + '{"id": "cut')
        return d

    a = run("a", [{"id": "1", "suggestion": [], "prompt_digest": "p"}, {"id": "2", "suggestion": [["m.py", 0, 1, "x"]],
                  "prompt_digest": "q"}, {"id": "3", "suggestion": [], "prompt_digest": "r"}, {"id": "only-a"}])
    b = run("b", [{"id": "1", "suggestion": [], "prompt_digest": "p"}, {"id": "2", "suggestion": [],
                  "prompt_digest": "q2"}, {"id": "3", "suggestion": [["m.py", 0, 0, "y"]], "prompt_digest": "r"}])
    assert compare_runs(a, b) == (1, [("2", "suggestion and prompt"), ("3", "suggestion")])
    with pytest.raises(FileNotFoundError, match="no results"):
        compare_runs(a, tmp_path / "none")
