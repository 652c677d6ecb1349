"""One bad case never aborts an evaluation: it is reported with its reason and the run goes on
(JSONL cases, git-history replay, HumanEval)."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import git
import pytest

from evals import humaneval, replay
from evals.cases import Case, Cursor, Edit, dumps, read_cases
from evals.datasets import InfillTask
from evals.metrics import summarize_cases
from evals.runners import CaseRunner, run_cases
from evals.sandbox import Limits
from evals.store import ResultStore
from tests.conftest import ROOT

FIXTURE = Path(__file__).parent / "fixtures" / "evals" / "cases.jsonl"


def _case(cid: str, history: list[str] | None = None) -> Case:
    text = "def f(x):\n    return x + 1\n"
    return Case(id=cid, kind="fim", language="python", path="a.py", files={"a.py": text},
                cursor=Cursor("a.py", 26), expected=[Edit("a.py", 26, 26, "")], history=history or [])


BAD_DIFF = "--- a/a.py\n+++ b/a.py\n@@ -1,2 +1,2 @@\n-def f(x):\n+def nothing_like_this(y):\n     return x + 1\n"


class FakeRunner(CaseRunner):
    """A CaseRunner without a server: ``_run`` answers, or breaks on ids containing "crash"."""

    def __init__(self, root: Path) -> None:
        super().__init__(model="none", device="cpu", root=root, log_path=root / "log", gate=True,
                         threshold=None, timeout=5)
        self.started = 0
        self.ran: list[str] = []

    async def _ensure(self):  # type: ignore[override]
        if self.client is None:
            self.client, self.started = object(), self.started + 1  # type: ignore[assignment]
        return self.client

    async def close(self) -> None:
        self.client = None

    async def _use_folder(self, client, folder) -> None:  # type: ignore[override]
        pass

    async def _run(self, client, case, states, uris, cleanup) -> dict[str, Any]:  # type: ignore[override]
        self.ran.append(case.id)
        if "crash" in case.id:
            raise BrokenPipeError("server went away")
        return {"id": case.id, "kind": case.kind, "language": case.language, "category": "fim",
                "quiet_case": False, "shown": True, "accepted": True, "partial": 1.0, "correct": True,
                "score": 0.9, "latency_ms": 1.0, "error": None, "suggestion": []}


def test_a_case_whose_history_does_not_apply_is_an_error_case_and_the_run_goes_on(tmp_path: Path) -> None:
    cases = [_case("good-1"), _case("bad-diff", [BAD_DIFF]), _case("crash-1"), _case("good-2")]
    store = ResultStore(tmp_path / "out", {"k": 1})
    runner = FakeRunner(tmp_path / "ws")
    run_cases(cases, store, runner)
    recs = store.records
    assert set(recs) == {"good-1", "bad-diff", "crash-1", "good-2"}
    assert recs["bad-diff"]["bad_case"] and "diff does not apply" in recs["bad-diff"]["error"]
    assert "bad-diff" not in runner.ran  # never sent to the server
    assert not recs["crash-1"]["bad_case"] and "server went away" in recs["crash-1"]["error"]
    assert runner.ran == ["good-1", "crash-1", "good-2"] and runner.started == 2  # restarted after the crash
    s = summarize_cases(list(recs.values()))
    assert s["n"] == 3 and s["bad_cases"] == 1 and s["errors"] == 1 and s["accept_rate"] == 2 / 3


def test_unreadable_lines_are_bad_cases_when_asked(tmp_path: Path) -> None:
    f = tmp_path / "c.jsonl"
    f.write_text(dumps(_case("ok")) + "\n{not json\n" + '{"id": "half", "kind": "fim"}\n')
    bad: list[tuple[str, str]] = []
    assert [c.id for c in read_cases(f, bad)] == ["ok"]
    assert [b[0] for b in bad] == ["line 2", "half"] and "c.jsonl:3" in bad[1][1]
    with pytest.raises(ValueError, match="c.jsonl:2"):
        read_cases(f)  # strict by default


def test_eval_cases_cli_reports_bad_cases_and_finishes(tmp_path: Path, monkeypatch) -> None:
    """The CLI path end to end with the server replaced (the real server: test_evals_cli)."""
    f = tmp_path / "c.jsonl"
    f.write_text(dumps(_case("good")) + "\n" + dumps(_case("bad-diff", [BAD_DIFF])) + "\n{oops\n")
    from evals import cli, runners

    monkeypatch.setattr(runners, "CaseRunner", lambda **kw: FakeRunner(kw["root"]))
    parser = __import__("argparse").ArgumentParser()
    sub = parser.add_subparsers()
    cli.register(sub)
    args = parser.parse_args(["eval", "cases", str(f), "--out", str(tmp_path / "out"), "--no-progress"])
    assert args.func(args) == 0
    rep = json.loads((tmp_path / "out" / "report.json").read_text())
    errors = {r["id"]: r["error"] for r in rep["cases"] if r.get("bad_case")}
    assert set(errors) == {"bad-diff", "line 3"} and rep["summary"]["n"] == 1
    assert "Bad cases" in (tmp_path / "out" / "summary.md").read_text()


def test_replay_skips_a_commit_that_fails(tmp_path: Path, monkeypatch) -> None:
    repo = tmp_path / "repo"
    r = git.Repo.init(repo)
    who = git.Actor("t", "t@example.invalid")
    for i, text in enumerate(["x = 1\n", "x = 1\ny = x + 41\n", "x = 1\ny = x + 41\nz = y * 2\n"]):
        (repo / "m.py").write_text(text)
        r.index.add(["m.py"])
        r.index.commit(f"c{i}", author=who, committer=who)
    head = r.head.commit.hexsha
    real = replay._commit_cases

    def flaky(name, commit, opts):
        if commit.hexsha == head:
            raise UnicodeDecodeError("utf-8", b"\xff", 0, 1, "odd blob")
        return real(name, commit, opts)

    monkeypatch.setattr(replay, "_commit_cases", flaky)
    skipped: list[tuple[str, str]] = []
    cases = replay.build_cases(repo, replay.ReplayOptions(seed=1), skipped)
    assert [s[0] for s in skipped] == [head] and "odd blob" in skipped[0][1]
    assert cases and all(c.meta["commit"] != head for c in cases)


def test_humaneval_a_task_that_breaks_is_recorded_and_the_rest_run(tmp_path: Path, monkeypatch) -> None:
    tasks = [InfillTask(f"T/{i}", "def f():\n", "\n", "    return 1\n", "def check(f):\n    assert f() == 1\n", "f")
             for i in range(4)]

    class Client:
        def __init__(self) -> None:
            self.stopped = False

        async def notify(self, method: str, params: dict) -> None:
            if method == "textDocument/didOpen" and "task_00001" in params["textDocument"]["uri"]:
                raise ConnectionResetError("server died")

        async def request(self, method: str, params: dict, timeout: float) -> Any:
            return {"items": [{"insertText": "    return 1"}]}

        async def stop(self) -> None:
            self.stopped = True

    started: list[Client] = []

    async def start(*a: Any) -> Client:
        started.append(Client())
        return started[-1]

    real_score = humaneval.score

    def score(task, middle, limits):
        if task.task_id == "T/2":
            raise OSError("sandbox unavailable")
        return real_score(task, middle, limits)

    monkeypatch.setattr(humaneval, "_start", start)
    monkeypatch.setattr(humaneval, "score", score)
    store = ResultStore(tmp_path / "out", {"k": 1})
    scorer = humaneval.Scorer(store, Limits(timeout_s=10, cpu_s=10), 1)
    asyncio.run(humaneval._generate_lsp(tasks, scorer, model="m", device="cpu", split="single-line", root=tmp_path,
                                        log_path=tmp_path / "log", timeout=5, init_extra={}, progress=iter))
    scorer.close()
    recs = store.records
    assert set(recs) == {"T/0", "T/1", "T/2", "T/3"} and len(started) == 2  # restarted after T/1
    assert "server died" in recs["T/1"]["error"] and recs["T/1"]["passed"] is False
    assert recs["T/2"]["status"] == "error" and "sandbox unavailable" in recs["T/2"]["error"]
    assert recs["T/0"]["passed"] and recs["T/3"]["passed"]


def test_humaneval_via_lsp_sends_the_trigger_kind_asked(tmp_path: Path, monkeypatch) -> None:
    tasks = [InfillTask("T/0", "def f():\n", "\n", "    return 1\n", "def check(f):\n    assert f() == 1\n", "f")]
    kinds: list[int] = []

    class Client:
        async def notify(self, method: str, params: dict) -> None:
            pass

        async def request(self, method: str, params: dict, timeout: float) -> Any:
            kinds.append(params["context"]["triggerKind"])
            return {"items": [{"insertText": "    return 1"}]}

        async def stop(self) -> None:
            pass

    async def start(*a: Any) -> Client:
        return Client()

    monkeypatch.setattr(humaneval, "_start", start)
    for trigger in ("invoked", "automatic"):
        store = ResultStore(tmp_path / trigger, {"k": 1})
        scorer = humaneval.Scorer(store, Limits(timeout_s=10, cpu_s=10), 1)
        asyncio.run(humaneval._generate_lsp(tasks, scorer, model="m", device="cpu", split="single-line",
                                            root=tmp_path, log_path=tmp_path / "log", timeout=5, init_extra={},
                                            progress=iter, trigger=trigger))
        scorer.close()
        assert store.records["T/0"]["passed"]
    assert kinds == [1, 2]  # LSP InlineCompletionTriggerKind: Invoked, Automatic


@pytest.mark.e2e
def test_eval_cases_with_a_bad_case_through_the_real_server(tmp_path: Path) -> None:
    f = tmp_path / "c.jsonl"
    good = FIXTURE.read_text().splitlines()[0]
    f.write_text(good + "\n" + dumps(_case("bad-diff", [BAD_DIFF])) + "\n")
    cmd = [sys.executable, "-m", "edit_server.cli", "eval", "cases", str(f), "--model", "tiny-random",
           "--device", "cpu", "--max-tokens", "8", "--context-budget", "256", "--timeout", "120",
           "--out", str(tmp_path / "out"), "--no-progress"]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=280, cwd=ROOT)
    assert res.returncode == 0, res.stderr[-3000:]
    rep = json.loads((tmp_path / "out" / "report.json").read_text())
    recs = {r["id"]: r for r in rep["cases"]}
    assert recs["bad-diff"]["bad_case"] and "diff does not apply" in recs["bad-diff"]["error"]
    assert recs["fim-perimeter"]["error"] is None and rep["summary"]["n"] == 1


def test_each_humaneval_task_is_gone_from_the_workspace_before_it_closes(tmp_path: Path) -> None:
    """A closed file still on disk is indexed by the server and shows up in the next task's context."""
    from evals.datasets import InfillTask

    task = InfillTask("T/0", "def f():\n", "\n", "    return 1\n", "def check(f):\n    assert f() == 1\n", "f")
    seen: list[tuple[str, bool]] = []

    class Client:
        async def notify(self, method: str, params: dict) -> None:
            path = Path(params["textDocument"]["uri"].removeprefix("file://"))
            seen.append((method, path.is_file()))

        async def request(self, method: str, params: dict, timeout: float) -> Any:
            return {"items": [{"insertText": "    return 1"}]}

    rec = asyncio.run(humaneval._one_lsp(Client(), 0, task, "single-line", tmp_path, 5))  # type: ignore[arg-type]
    assert rec["middle"] == "    return 1\n" and rec["shown"]
    assert seen == [("textDocument/didOpen", True), ("textDocument/didClose", False)]
    assert not list((tmp_path / "humaneval").iterdir())



def test_a_hole_typed_part_way_into_its_line_is_not_a_whole_line(tmp_path: Path) -> None:
    """`scripts/humaneval_typed.py` moves a single-line task's cursor into its line (the line break right of it,
    in the suffix): no empty line is added to the document, no line break to the answer."""
    from evals.datasets import InfillTask

    task = InfillTask("T/0", "def f():\n    retu", "\n", "rn 1", "def check(f):\n    assert f() == 1\n", "f")
    opened: list[str] = []

    class Client:
        async def notify(self, method: str, params: dict) -> None:
            if method == "textDocument/didOpen":
                opened.append(params["textDocument"]["text"])

        async def request(self, method: str, params: dict, timeout: float) -> Any:
            assert params["position"] == {"line": 1, "character": 8}
            return {"items": [{"insertText": "rn 1"}]}

    rec = asyncio.run(humaneval._one_lsp(Client(), 0, task, "single-line", tmp_path, 5))  # type: ignore[arg-type]
    assert opened == ["def f():\n    retu\n"] and rec["middle"] == "rn 1" and not rec["edited_outside_hole"]
    assert humaneval.fix_middle("single-line", "rn 1", task.prompt) == "rn 1"
    assert humaneval.fix_middle("single-line", "    return 1", "def f():\n") == "    return 1\n"
    assert humaneval.fix_middle("random-span", "x", "def f():\n") == "x"
