"""The in-process next-edit evaluation (`evals/next_edit.py`): judged like the server replay, scored like
the gate, summarised with precision per show threshold — and runnable with the GPU image's packages only."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from engine.types import EngineInfo, GenerateResult
from evals import next_edit
from tests.test_evals_minimal_image import ROOT, blocked_env

TEXT = "".join(f"line_{i} = {i}\n" for i in range(30))
CUR = TEXT.index("line_15") + 3


def _case(cid: str, category: str, expected: list[dict[str, Any]] | None) -> dict[str, Any]:
    return {"id": cid, "kind": "edit", "language": "python", "path": "m.py", "files": {"m.py": TEXT},
            "cursor": {"path": "m.py", "offset": CUR}, "expected": expected,
            "history": ["--- a/m.py\n+++ b/m.py\n@@ -1 +1 @@\n-old\n+line_0 = 0\n"],
            "meta": {"repo": "r", "category": category}}


def _truth(old: str, new: str) -> list[dict[str, Any]]:
    s = TEXT.index(old)
    return [{"path": "m.py", "start": s, "end": s + len(old), "text": new}]


CASES = [_case("a", "next-edit", _truth("line_17 = 17\n", "line_17 = 170\n")),
         _case("b", "next-edit", _truth("line_12 = 12\n", "")),
         _case("c", "elsewhere", None), _case("d", "done", None)]


class FakeEngine:
    """Rewrites the region: case a right (score 0.9), case b wrong (score 0.6), quiet c unchanged, quiet d
    changed (score 0.4); records the prompts."""

    info = EngineInfo(edit_layout="file-history", edit_history=1)

    def __init__(self) -> None:
        self.prompts: list[Any] = []

    def rewrite(self, prompt: Any, cache_key: str | None = None) -> GenerateResult:
        self.prompts.append(prompt)
        r = prompt.region
        key = cache_key or ""
        if key.endswith(":a"):
            text, conf = r.replace("line_17 = 17\n", "line_17 = 170  \n"), [0.9]  # trailing space: still exact
        elif key.endswith(":b"):
            text, conf = r.replace("line_13 = 13\n", ""), [0.6]
        elif key.endswith(":c"):
            text, conf = r + "\n", [0.99]  # a blank line only: no change
        else:
            text, conf = r.replace("line_16", "line_x"), [0.4]
        return GenerateResult(text, [1, 2], [0.99, 0.99], 2, 3, 50, 0, "end", changed=conf)


def test_judge_and_summary(tmp_path: Path) -> None:
    eng = FakeEngine()
    rep = next_edit.run(CASES, eng, next_edit.Options(), tmp_path)
    s = rep["summary"]
    assert s["counts"] == {"next-edit": 2, "elsewhere": 1, "done": 1} and s["errors"] == 0
    assert s["next_edit_exact"] == 0.5 and s["next_edit_shown"] == 1.0
    assert s["no_edit_correct"] == {"elsewhere": 1.0, "done": 0.0, "all": 0.5}
    assert s["shown_rate"] == 0.75 and abs(s["precision_when_shown"] - 1 / 3) < 1e-9
    assert s["tokens_per_step"] == 1.0
    curve = {c["threshold"]: c for c in s["precision_coverage"]}
    assert (curve[0.5]["shown"], curve[0.5]["right"], curve[0.5]["quiet_shown"]) == (2, 1, 0)
    assert curve[0.7]["precision"] == 1.0 and curve[0.7]["next_edit_exact"] == 0.5
    assert curve[0.95]["shown"] == 0 and curve[0.95]["precision"] is None
    # the prompt: the 6 / 8 window, the model's layout and trained history count, the file around it
    p = eng.prompts[0]
    assert p.region.splitlines()[0] == "line_9 = 9" and p.region.splitlines()[-1] == "line_23 = 23"
    assert p.layout == "file-history" and len(p.history) == 1
    assert p.before.startswith("line_0 = 0") and p.after.startswith("line_24")
    assert p.region[p.cursor:].startswith("e_15")
    recs = [json.loads(x) for x in (tmp_path / "results.jsonl").read_text().splitlines()]
    assert [r["exact"] for r in recs] == [True, False, None, None] and recs[1]["f1"] == 0.0
    assert json.loads((tmp_path / "report.json").read_text())["options"]["history"] == 1
    # a shown rewrite keeps its diff (numbered in the file) and the truth's; a silent one neither
    assert "\n-line_13 = 13\n" in recs[1]["diff"] and "@@ -11,7 +11,6 @@" in recs[1]["diff"]  # the file's lines
    assert "\n-line_12 = 12\n" in recs[1]["want"] and "\n-line_13" not in recs[1]["want"]
    assert "diff" not in recs[2] and "want" not in recs[3] and "+line_x = 16\n" in recs[3]["diff"]
    # and the rewrite itself (`edit-server eval rules --rewrites`): the region as the model wrote it
    assert recs[1]["new"] == eng.prompts[1].region.replace("line_13 = 13\n", "") and "new" not in recs[2]


def test_context_lines_and_history_options_and_engine_failures(tmp_path: Path) -> None:
    class Broken(FakeEngine):
        def rewrite(self, prompt: Any, cache_key: str | None = None) -> GenerateResult:
            self.prompts.append(prompt)
            raise RuntimeError("boom")

    eng = Broken()
    rep = next_edit.run(CASES[:2], eng, next_edit.Options(context_lines=2, history=0), tmp_path)
    assert rep["summary"]["errors"] == 2 and rep["summary"]["next_edit_exact"] == 0.0
    p = eng.prompts[0]
    assert p.before == "line_7 = 7\nline_8 = 8\n" and p.after == "line_24 = 24\nline_25 = 25\n" and p.history == ()


def test_read_cases_names_a_broken_case(tmp_path: Path) -> None:
    f = tmp_path / "cases.jsonl"
    f.write_text(json.dumps(CASES[0]) + "\n" + json.dumps({"id": "x", "path": "m.py"}) + "\n")
    try:
        next_edit.read_cases(tmp_path)
    except ValueError as e:
        assert "case 2 (x)" in str(e) and "files" in str(e)
    else:
        raise AssertionError("a broken case was read")


def test_runs_with_only_the_gpu_image_packages(tmp_path: Path) -> None:
    import gzip

    cases = tmp_path / "cases.jsonl.gz"
    with gzip.open(cases, "wt", encoding="utf-8") as f:
        f.write("".join(json.dumps(c) + "\n" for c in CASES))
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "evals", "next-edit", str(cases), "--model", "tiny-random", "--device", "cpu",
           "--limit", "2", "--out", str(out), "--no-progress"]
    r = subprocess.run(cmd, env=blocked_env(tmp_path / "block"), capture_output=True, text=True, cwd=ROOT,
                       timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "next edits in process (tiny-random" in r.stdout and ": 2 cases" in r.stdout
    rep = json.loads((out / "report.json").read_text())
    assert rep["summary"]["n"] == 2 and rep["summary"]["errors"] == 0


def test_the_gpu_job_runs_the_next_edit_eval_first_within_its_share(tmp_path: Path, monkeypatch: Any) -> None:
    from engine.train.recipe import job

    w = job.Work(tmp_path / "work")
    ran: list[tuple[list[str], float | None]] = []

    def fake_run(cmd: list[str], env: dict[str, str], stdin: Any, timeout: float | None) -> Any:
        ran.append((cmd, timeout))
        return subprocess.CompletedProcess(cmd, 0)

    monkeypatch.setattr(job.subprocess, "run", fake_run)
    recipe = {"eval": {"splits": ["single-line"], "limit": 10, "next_edit": "data/next-edit/cases.jsonl.gz"}}
    job.run_eval(w, recipe, seconds=100.0)
    (ne, t_ne), (he, _) = ran
    assert ne[2:4] == ["evals", "next-edit"] and ne[4] == str(w.boot / "data/next-edit/cases.jsonl.gz")
    assert ne[ne.index("--out") + 1] == str(w.run / "eval" / "next-edit") and t_ne is not None and t_ne <= 50
    assert 30 <= float(ne[ne.index("--budget-s") + 1]) <= 40  # half the time, less 10 s for the report
    assert he[3] == "humaneval-infill"
    ran.clear()
    job.run_eval(w, {"eval": {"splits": ["single-line"], "limit": 10}}, seconds=0.0)  # a pack without cases
    assert [c[3] for c, _ in ran] == ["humaneval-infill"] and "--budget-s" not in ran[0][0]
    # a stopped next-edit eval is summarised as one
    out = tmp_path / "partial"
    out.mkdir()
    (out / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in (
        {"category": "next-edit", "exact": True}, {"category": "next-edit", "exact": False}, {"category": "done"})))
    assert job.partial_eval(out, "next-edit")["next_edit_exact"] == 0.5


def test_the_pack_carries_the_cases_and_the_recipe_names_them(tmp_path: Path) -> None:
    import gzip
    import tarfile

    from engine.train.recipe.pack import NEXT_EDIT_CASES, make_boot, make_recipe

    cases = tmp_path / "c.jsonl.gz"
    with gzip.open(cases, "wt", encoding="utf-8") as f:
        f.write(json.dumps(CASES[0]) + "\n")
    recipe = make_recipe({"model": "tiny"}, sources=[], corpus_options={}, tokenizer={"byte": True}, base=None,
                         eval_splits=["single-line"], eval_limit=5, next_edit=True)
    assert recipe["eval"]["next_edit"] == NEXT_EDIT_CASES
    boot = make_boot(tmp_path / "boot.tar.xz", recipe, tokenizer_json=None, wheels=[], data=None,
                     next_edit_cases=cases)
    with tarfile.open(boot) as tar:
        assert NEXT_EDIT_CASES in tar.getnames()
        got = tar.extractfile(NEXT_EDIT_CASES)
        assert got is not None and json.loads(gzip.decompress(got.read()))["id"] == "a"
    assert "next_edit" not in make_recipe({}, sources=[], corpus_options={}, tokenizer={}, base=None,
                                          eval_splits=[], eval_limit=0)["eval"]


def test_held_out_repositories_are_never_trained_on(tmp_path: Path) -> None:
    from engine.train.gpu_recipe import heldout_repos, next_edit_repos

    assert [p.name for p in heldout_repos()] == ["click.bundle", "ky.bundle"]
    here = tmp_path / "click.bundle"
    here.write_bytes(b"")
    assert next_edit_repos([here, tmp_path / "ky.bundle"], {"git_repos": ["x/attrs.bundle"]}) == [here]
    try:
        next_edit_repos([here], {"git_repos": ["../shared/data/git/click.bundle"]})
    except ValueError as e:
        assert "click.bundle" in str(e)
    else:
        raise AssertionError("a held-out repository in git_repos was accepted")
    cfg = json.loads((ROOT / "engine/train/configs/gpu_qwen05b_bd3.json").read_text())
    assert not {Path(g).name for g in cfg["git_repos"]} & {p.name for p in heldout_repos()}
