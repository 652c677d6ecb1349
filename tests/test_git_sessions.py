"""Edit sessions from real git histories: extraction, filters and their counts, joining, the replay."""

from __future__ import annotations

import random
import subprocess
from pathlib import Path

import pytest

from engine.git_history import (
    ExtractReport,
    GitSession,
    apply_steps,
    extract_sessions,
    git_env,
    read_sessions,
    states_of,
    write_sessions,
)
from engine.git_replay import cursor_after, pending_in_region
from engine.templates import EDIT_HISTORY, strip_canvas
from engine.tokenizer import Tokenizer
from engine.train.git_sessions import load_git_sources, session_example
from engine.train.tasks import Budget

TOK = Tokenizer.byte_level()
BUDGET = Budget(max_len=2048, block_size=16, max_canvas=512, chars_per_token=1.0)
V1 = "".join(f"def f{i}(x):\n    return x + {i}\n\n\n" for i in range(12))


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@e", "-c",
                    "core.hooksPath=/dev/null", "-c", "commit.gpgsign=false", *args], check=True,
                   capture_output=True, env=git_env())


def _commit(repo: Path, files: dict[str, str | bytes], msg: str) -> None:
    for name, text in files.items():
        p = repo / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(text if isinstance(text, bytes) else text.encode())
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", msg)


@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    r = tmp_path_factory.mktemp("repo")
    _git(r, "init", "-q", "-b", "main")
    _commit(r, {"a.py": V1, "b.py": V1, "package-lock.json": "{}\n", "vendor/x.py": V1, "img.py": b"\0\1"},
            "one")
    v2 = V1.replace("x + 3", "x * 3").replace("x + 9", "x * 9")
    _commit(r, {"a.py": v2, "package-lock.json": '{"a": 1}\n', "vendor/x.py": v2, "img.py": b"\0\2"}, "two")
    v3 = v2.replace("def f5(x):", "def f5(x, y):").replace("x + 5", "x + y")
    _commit(r, {"a.py": v3, "b.py": V1.replace("return x + 1\n", "return  x + 1\n")}, "three")
    _commit(r, {"a.py": v3.replace("x + 7", "x - 7")}, "four")
    _commit(r, {"c.py": V1}, "five")
    (r / "a.py").write_text(v3.replace("x + 7", "x - 7"))
    # a hostile config: a program git would run if it honoured it
    _git(r, "config", "core.fsmonitor", f"touch {r / 'PWNED'}")
    return r


def test_extract_joins_consecutive_commits_and_counts_drops(repo: Path) -> None:
    rep = ExtractReport()
    sessions = extract_sessions(repo, report=rep)
    assert not (repo / "PWNED").exists()
    assert rep.commits == 5
    r = rep.reasons
    assert r["lock"] == 1 and r["vendored"] == 1 and r["binary"] == 1 and r["formatting-only"] == 1
    assert r["added-file"] == 1 and r["root-commit"] == 5 and r["kept"] == 3
    assert [s.path for s in sessions] == ["a.py"]
    s = sessions[0]
    assert len(s.commits) == 3 and s.commit_of == [0, 0, 1, 2]  # f5: one hunk (two adjacent lines)
    final = (repo / "a.py").read_text()
    assert states_of(s)[-1] == final and s.base == V1  # a small file is kept whole
    # top to bottom within a commit: f3 before f9
    assert s.steps[0][2] == "    return x * 3\n" and s.steps[1][2] == "    return x * 9\n"
    assert extract_sessions(repo) == sessions  # deterministic


def test_cursor_region_and_target(repo: Path) -> None:
    s = extract_sessions(repo)[0]
    states = states_of(s)
    cur = cursor_after(states[1], s.steps[0])
    assert states[1][:cur].endswith("return x * 3")
    ra, rb = 0, len(states[1])  # the whole file as the region: every pending step applied
    _, _, new = pending_in_region(states[1], states[-1], ra, rb)
    assert new == states[-1]
    line = states[1].rfind("\n", 0, cur) + 1  # only the cursor's line: nothing pending there
    a, b, new = pending_in_region(states[1], states[-1], line, states[1].find("\n", cur) + 1)
    assert new == states[1][a:b]


def test_session_examples_render_history_and_target(repo: Path) -> None:
    s = extract_sessions(repo)[0]
    rng = random.Random(0)
    kinds = set()
    for k in [k for _ in range(4) for k in range(1, len(s.steps) + 1)]:  # regions are drawn: several rounds
        ex = session_example(TOK, s, rng, BUDGET, k=k)
        assert ex is not None
        kinds.add(ex.kind)
        region, new_region = ex.meta["region"], ex.meta["new_region"]
        assert TOK.decode(strip_canvas(TOK, ex.target)) == new_region
        if k == len(s.steps):  # nothing left: no edit
            assert ex.kind == "noedit:git" and new_region == region
        assert len(ex.meta["prompt"].history) == min(k, EDIT_HISTORY)  # as the server shows them
    assert kinds == {"edit:git", "noedit:git"}
    # after f3's hunk: f5's (next commit, 7 lines below) is pending in a region that reaches it, whole
    exs = [session_example(TOK, s, random.Random(seed), BUDGET, k=1) for seed in range(20)]
    reach = [e for e in exs if "def f5(x):\n    return x + 5\n" in e.meta["region"]]
    assert reach and all("def f5(x, y):\n    return x + y\n" in e.meta["new_region"] for e in reach)
    assert any(e.kind == "noedit:git" for e in exs)  # a short region: nothing pending in it


def test_write_read_roundtrip_is_deterministic(repo: Path, tmp_path: Path) -> None:
    sessions = extract_sessions(repo)
    n = write_sessions(tmp_path / "a.jsonl.gz", sessions)
    write_sessions(tmp_path / "b.jsonl.gz", sessions)
    assert n == 1 and (tmp_path / "a.jsonl.gz").read_bytes() == (tmp_path / "b.jsonl.gz").read_bytes()
    assert read_sessions(tmp_path / "a.jsonl.gz") == sessions
    assert load_git_sources([str(tmp_path / "a.jsonl.gz"), str(repo)]) == sessions * 2
    with pytest.raises(FileNotFoundError, match="git_repos: .*nope"):
        load_git_sources([str(tmp_path / "nope")])


def test_long_file_is_trimmed_around_the_steps(tmp_path: Path) -> None:
    r = tmp_path / "r"
    r.mkdir()
    _git(r, "init", "-q", "-b", "main")
    big = "".join(f"line_{i} = {i}\n" for i in range(400))
    _commit(r, {"m.py": big}, "one")
    _commit(r, {"m.py": big.replace("line_200 = 200", "line_200 = -200")}, "two")
    s = extract_sessions(r)[0]
    assert len(s.base.splitlines()) < 130 and "line_200 = 200" in s.base
    assert apply_steps(s.base, s.steps) in big.replace("line_200 = 200", "line_200 = -200")


def test_bad_sessions_file_names_the_line(tmp_path: Path) -> None:
    import gzip

    p = tmp_path / "bad.jsonl.gz"
    with gzip.open(p, "wt") as f:
        f.write(GitSession("r", "a.py", ["c"], "x\n", [(0, 1, "y")]).to_json() + "\n{}\n")
    with pytest.raises(ValueError, match=r"bad.jsonl.gz: line 2"):
        read_sessions(p)


def test_gpu_pack_stages_sessions_and_the_trainer_reads_them(repo: Path, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """The pack extracts ``git_repos`` into the boot bundle and points the config at it (the job runs in
    boot/code); the trainer's ``git`` kind replays those sessions."""
    from engine.train.corpus import Doc
    from engine.train.recipe.git_data import stage_git_sessions
    from engine.train.stream import ExampleStream
    from engine.train.trainer import TrainConfig, _git_pairs

    stage = tmp_path / "boot"
    cfg = stage_git_sessions({"steps": 3, "git_repos": [str(repo)], "mix": {"git": 1.0}}, stage)
    assert cfg["git_repos"] == ["../git/sessions.jsonl.gz"] and cfg["steps"] == 3
    assert read_sessions(stage / "git" / "sessions.jsonl.gz") == extract_sessions(repo)
    assert stage_git_sessions({"steps": 3}, tmp_path / "none") == {"steps": 3}
    (stage / "code").mkdir()
    monkeypatch.chdir(stage / "code")
    sessions = _git_pairs(TrainConfig(git_repos=cfg["git_repos"], mix={"git": 1.0}))
    assert len(sessions) == 1
    text = V1 * 3
    stream = ExampleStream([Doc("m.py", "python", text, len(text))], TOK, BUDGET, {"git": 1.0}, 0, sessions)
    assert {e.kind for e in stream.take(12)} <= {"edit:git", "noedit:git"}


def test_half_the_session_examples_take_the_served_region(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from engine.git_history import states_of
    from engine.git_replay import cursor_after
    from engine.templates import EDIT_REGION_ABOVE, EDIT_REGION_BELOW
    from engine.textdiff import line_span
    from engine.train import git_sessions

    s = extract_sessions(repo)[0]
    current = states_of(s)[1]
    a, b = line_span(current, cursor_after(current, s.steps[0]), EDIT_REGION_ABOVE, EDIT_REGION_BELOW)
    served = current[a:b]

    def share() -> float:
        exs = [session_example(TOK, s, random.Random(seed), BUDGET, k=1) for seed in range(60)]
        return sum(served in e.meta["region"] for e in exs if e is not None) / len(exs)

    assert 0.3 <= share() <= 0.75  # SERVED_REGION_SHARE 0.5 (a drawn region may also cover it by chance)
    monkeypatch.setattr(git_sessions, "SERVED_REGION_SHARE", 1.0)
    assert share() == 1.0
    monkeypatch.setattr(git_sessions, "SERVED_REGION_SHARE", 0.0)
    assert share() < 0.2


def test_the_served_region_fits_the_edit_canvas(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A rewrite's canvas has its own cap (`max_edit_canvas`): with the FIM cap (128) half the served 15-line
    regions of real code were silently dropped from training (a 6 / 8 region is p50 103, p90 151 Qwen tokens
    on the training repositories: canvases of 160–224)."""
    import dataclasses
    import json

    from engine.templates import EDIT_REGION_ABOVE, EDIT_REGION_BELOW, edit_canvas_length
    from engine.train import git_sessions
    from engine.train.trainer import TrainConfig

    monkeypatch.setattr(git_sessions, "SERVED_REGION_SHARE", 1.0)
    s = extract_sessions(repo)[0]
    region_tok = len(TOK.encode(states_of(s)[1])) // 3  # room for the served region, not the whole file
    fim_only = dataclasses.replace(BUDGET, max_canvas=edit_canvas_length(region_tok, block_size=16) - 16)
    assert fim_only.edit_canvas == fim_only.max_canvas  # 0: the FIM cap
    with_edit = dataclasses.replace(fim_only, max_edit_canvas=512)
    assert with_edit.edit_canvas == 512 and with_edit.max_canvas == fim_only.max_canvas

    def kept(budget: Budget) -> int:
        return sum(session_example(TOK, s, random.Random(seed), budget, k=1) is not None for seed in range(20))

    assert kept(with_edit) == 20 and kept(fim_only) < 20
    cfg = TrainConfig(max_canvas=128, max_edit_canvas=256)
    assert cfg.budget().edit_canvas == 256 and cfg.budget().max_canvas == 128
    # the GPU recipe's Qwen config trains the canvases the server asks for (15 lines at ~10 tokens each)
    gpu = json.loads((Path(__file__).parents[1] / "engine/train/configs/gpu_qwen05b_bd3.json").read_text())
    lines = EDIT_REGION_ABOVE + 1 + EDIT_REGION_BELOW
    assert edit_canvas_length(lines * 10, block_size=gpu["block_size"]) <= gpu["max_edit_canvas"]
    assert gpu["max_canvas"] == 128  # FIM middles as before


def test_the_stream_counts_what_each_kind_made(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`ExampleStream.stats`: per kind, draws tried and examples made — the mix as trained, and a kind the
    budget starves shows it (its yield falls) instead of vanishing silently."""
    import dataclasses

    from engine.train import git_sessions
    from engine.train.corpus import Doc
    from engine.train.stream import ExampleStream

    monkeypatch.setattr(git_sessions, "SERVED_REGION_SHARE", 1.0)
    sessions = extract_sessions(repo)
    text = V1 * 3
    docs = [Doc("m.py", "python", text, len(text))]

    def stats(budget: Budget) -> dict:
        stream = ExampleStream(docs, TOK, budget, {"fim": 0.5, "git": 0.5}, 0, sessions)
        stream.take(30)
        return stream.stats()

    roomy = stats(BUDGET)
    assert sum(v["made"] for v in roomy.values()) == 30 and abs(sum(v["share"] for v in roomy.values()) - 1) < 0.01
    assert all(v["tries"] >= v["made"] > 0 for v in roomy.values()) and roomy["git"]["yield"] > 0.5
    tight = stats(dataclasses.replace(BUDGET, max_canvas=48))  # the served regions' canvases do not fit
    assert tight["git"]["yield"] < roomy["git"]["yield"] / 2 and tight["fim"]["yield"] > 0.5


def test_held_out_sessions_for_the_pack_are_a_deterministic_file(repo: Path, tmp_path: Path) -> None:
    """`build_heldout_sessions`: each repository's sessions (capped) in one .jsonl.gz the GPU job reads without
    git; the same sources give the same bytes (the pack's boot bundle does not change between packs)."""
    from engine.train.recipe.git_data import build_heldout_sessions

    a = build_heldout_sessions([repo, repo], tmp_path / "a.jsonl.gz", per_repo=5)
    b = build_heldout_sessions([repo, repo], tmp_path / "b.jsonl.gz", per_repo=5)
    assert read_sessions(a) == extract_sessions(repo) * 2 and a.read_bytes() == b.read_bytes()
    assert read_sessions(build_heldout_sessions([repo], tmp_path / "c.jsonl.gz", per_repo=0)) == extract_sessions(repo)


def test_the_budget_sets_how_many_session_examples_are_drawn_after_any_hunk(
        repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`Budget.git_noedit_share` (TrainConfig's, a warm restart takes it): that share of the draws takes any hunk
    (mostly no-edit examples), the rest a hunk whose next one is near the cursor; an explicit argument wins."""
    from dataclasses import replace

    from engine.train import git_sessions

    s = extract_sessions(repo)[0]
    near: list[int] = []
    real = git_sessions.near_ks

    def counted(sess: object) -> list[int]:
        near.append(1)
        return real(sess)  # type: ignore[arg-type]

    monkeypatch.setattr(git_sessions, "near_ks", counted)

    def draws(budget: Budget, **kw: float) -> int:
        near.clear()
        for seed in range(40):
            git_sessions.git_example(TOK, s, random.Random(seed), budget, **kw)
        return len(near)

    assert draws(replace(BUDGET, git_noedit_share=1.0)) == 0  # every draw after any hunk
    assert draws(replace(BUDGET, git_noedit_share=0.0)) == 40  # every draw near the next hunk
    assert 15 <= draws(replace(BUDGET, git_noedit_share=0.3)) <= 38
    assert draws(replace(BUDGET, git_noedit_share=1.0), noedit_share=0.0) == 40
    from engine.train.recipe.window import EXTEND_KEYS
    from engine.train.train_state import TRAJECTORY

    assert "git_noedit_share" in EXTEND_KEYS and "git_noedit_share" in TRAJECTORY
