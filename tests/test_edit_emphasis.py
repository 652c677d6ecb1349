"""A rewrite's changed tokens: found by a token diff, weighted by ``edit_emphasis``, measured apart."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import torch

from engine.config import preset
from engine.model import Transformer
from engine.tokenizer import Tokenizer
from engine.train.edit_tokens import measure
from engine.train.objective import bd3_loss, make_batch
from engine.train.tasks import Budget
from engine.train.tasks_edit import changed_positions, make_edit, make_noedit

TOK = Tokenizer.byte_level()
BUDGET = Budget(max_len=1024, block_size=16, max_canvas=256, chars_per_token=1.0)
CODE = "".join(f"def scale{i}(x, factor):\n    return x * factor + {i}\n\n\n" for i in range(8))


def _ids(s: str) -> list[int]:
    return TOK.encode(s)


def test_changed_positions_mark_inserted_replaced_and_the_token_after_a_cut() -> None:
    region = _ids("a = f(x)\n")
    assert changed_positions(region, region, 32) == ()  # a copy changes nothing
    # replaced: "x" -> "yz" at 6..7
    assert changed_positions(region, _ids("a = f(yz)\n"), 32) == (6, 7)
    # inserted: ", 1" after x
    assert changed_positions(region, _ids("a = f(x, 1)\n"), 32) == (7, 8, 9)
    # deleted "(x)": the token after the cut (the newline at 5) carries it
    assert changed_positions(region, _ids("a = f\n"), 32) == (5,)
    # deleted at the very end: the eom right after the new text carries it (position len(new))
    assert changed_positions(_ids("ab\ncd\n"), _ids("ab\n"), 32) == (3,)
    # positions past the canvas are dropped
    assert changed_positions(_ids("a"), _ids("abcdef"), 4) == (1, 2, 3)


def test_emphasis_multiplies_only_masked_changed_weights() -> None:
    target = list(range(10, 42))
    changed = (3, 4, 20)
    plain = make_batch([([1, 2, 3], target, changed)], 8, TOK.special.mask, TOK.special.pad,
                       torch.Generator().manual_seed(0))
    heavy = make_batch([([1, 2, 3], target, changed)], 8, TOK.special.mask, TOK.special.pad,
                       torch.Generator().manual_seed(0), emphasis=4.0)
    assert plain.changed is not None and plain.changed[0].nonzero().flatten().tolist() == [3, 4, 20]
    flag = plain.changed[0]
    assert torch.equal(heavy.weights[0, ~flag], plain.weights[0, ~flag])  # same noise: copies untouched
    assert torch.allclose(heavy.weights[0, flag], 4 * plain.weights[0, flag])
    assert torch.equal(heavy.weights > 0, plain.weights > 0)  # emphasis never unmasks or masks
    # a batch without changed positions carries no flags; bad positions and emphasis are refused
    none = make_batch([([1, 2, 3], target)], 8, TOK.special.mask, TOK.special.pad, torch.Generator())
    assert none.changed is None
    with pytest.raises(ValueError, match="changed position outside its canvas of 32"):
        make_batch([([1], target, (32,))], 8, TOK.special.mask, TOK.special.pad, torch.Generator())
    with pytest.raises(ValueError, match="emphasis 0"):
        make_batch([([1], target)], 8, TOK.special.mask, TOK.special.pad, torch.Generator(), emphasis=0)


def test_loss_reports_changed_tokens_apart() -> None:
    args = preset("tiny", special_tokens=TOK.special.as_dict())
    model = Transformer(args).init_random(0)
    target = [7] * 16
    # block rate forced high: mask everything by asking for many draws until the changed ones are masked
    for seed in range(50):
        b = make_batch([([1, 2, 3, 4], target, (2, 9))], 8, TOK.special.mask, TOK.special.pad,
                       torch.Generator().manual_seed(seed))
        if b.weights[0, 2] > 0 and b.weights[0, 9] > 0:
            break
    else:
        raise AssertionError("no draw masked both changed positions")
    _, m = bd3_loss(model, b)
    assert m["changed_masked"] == 2
    assert 0.0 <= m["changed_acc"] <= 1.0 and m["changed_ce"] > 0
    _, m2 = bd3_loss(model, make_batch([([1, 2, 3, 4], target)], 8, TOK.special.mask, TOK.special.pad,
                                       torch.Generator().manual_seed(seed)))
    assert "changed_acc" not in m2 and m2["loss"] == pytest.approx(m["loss"])  # emphasis 1: the plain loss


def test_edit_examples_carry_their_changed_positions_and_noedits_none() -> None:
    rng = random.Random(3)
    edits = 0
    for _ in range(30):
        ex = make_edit(TOK, CODE, "geo.py", rng, BUDGET, kind="rename")
        if ex is None or ex.kind.startswith("noedit"):
            if ex is not None:
                assert ex.changed == ()
            continue
        edits += 1
        region, new = ex.meta["region"], ex.meta["new_region"]
        assert ex.changed == changed_positions(_ids(region), _ids(new), len(ex.target))
        assert ex.changed and max(ex.changed) < len(ex.target)
    assert edits >= 3
    quiet = make_noedit(TOK, CODE, "geo.py", random.Random(1), BUDGET)
    assert quiet is not None and quiet.changed == ()


def test_measure_splits_changed_from_copied_tokens() -> None:
    args = preset("tiny", special_tokens=TOK.special.as_dict(), block_size=16)
    model = Transformer(args).init_random(0).eval()
    rng = random.Random(0)
    exs = [e for e in (make_edit(TOK, CODE, "geo.py", rng, BUDGET, kind="rename") for _ in range(20))
           if e is not None and e.changed][:4]
    assert len(exs) == 4
    r = measure(model, TOK, exs, batch_size=2)
    assert r["examples"] == 4 and 0 < r["changed_masked"] < r["masked"]
    assert 0 <= r["changed_acc"] <= 1 and 0 <= r["copy_acc"] <= 1
    assert 0 < r["changed_loss_share"] < 1
    assert measure(model, TOK, exs, batch_size=2) == r  # fixed noise: the same figures every call


def test_trainer_validation_reports_changed_accuracy(tmp_path: Path) -> None:
    from engine.train.corpus import build_corpus
    from engine.train.trainer import TrainConfig, train

    src = tmp_path / "src"
    src.mkdir()
    for i in range(6):
        (src / f"m{i}.py").write_text(CODE.replace("scale", f"s{i}_"))
    build_corpus([src], tmp_path / "corpus", TOK, tokenizer_name="byte")
    cfg = TrainConfig.from_dict(dict(
        model="tiny", corpus=str(tmp_path / "corpus"), out=str(tmp_path / "run"), seq_len=512, block_size=8,
        max_canvas=128, chars_per_token=1.0, batch_size=2, steps=2, lr=1e-3, warmup=1, rank=4, alpha=8,
        val_every=2, val_examples=6, save_every=100, threads=1, edit_emphasis=3.0, mix={"edit": 1.0}))
    s = train(cfg, progress=False)
    last = s["val"][-1]
    assert last["changed_masked"] > 0 and 0 <= last["changed_acc"] <= 1 and last["changed_ce"] > 0


def _sessions(path: Path) -> Path:
    """Three two-step sessions (a rename carried to the next line) as the pack writes them."""
    from engine.git_history import GitSession, write_sessions

    base = "".join(f"def f{i}(x):\n    return old_name(x) + {i}\n\n" for i in range(6))
    out = []
    for k in range(3):
        a = base.index(f"old_name(x) + {k}")
        b = base.index(f"old_name(x) + {k + 1}")  # the first step keeps the length: offsets stay
        out.append(GitSession("r", f"m{k}.py", ["c1"], base, [(a, a + 8, "new_name"), (b, b + 8, "new_name")], [0, 0]))
    write_sessions(path, out)
    return path


def test_edit_tokens_runs_with_only_the_gpu_image_packages(tmp_path: Path) -> None:
    import json
    import subprocess
    import sys

    from tests.test_evals_minimal_image import ROOT, blocked_env

    src, out = _sessions(tmp_path / "s.jsonl.gz"), tmp_path / "out"
    cmd = [sys.executable, "-m", "engine.train.edit_tokens", str(src), "--model", "tiny-random", "--device", "cpu",
           "--examples", "4", "--out", str(out)]
    r = subprocess.run(cmd, env=blocked_env(tmp_path / "block"), capture_output=True, text=True, cwd=ROOT,
                       timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "| s.jsonl.gz | 4 |" in r.stdout
    rep = json.loads((out / "report.json").read_text())
    row = rep["summary"]["s.jsonl.gz"]  # the job's collect reads `summary`
    assert rep["summary"]["split"] == "edit-tokens" and row["examples"] == 4 and row["changed_masked"] > 0


def test_the_pack_carries_held_out_sessions_and_the_job_measures_them_first(tmp_path: Path,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    import subprocess
    import tarfile
    from typing import Any

    from engine.train.recipe import job
    from engine.train.recipe.pack import NEXT_EDIT_SESSIONS, make_boot, make_recipe

    recipe = make_recipe({"model": "tiny"}, sources=[], corpus_options={}, tokenizer={"byte": True}, base=None,
                         eval_splits=["single-line"], eval_limit=5, next_edit=True, edit_tokens=True)
    assert recipe["eval"]["edit_tokens"] == NEXT_EDIT_SESSIONS
    boot = make_boot(tmp_path / "boot.tar.xz", recipe, tokenizer_json=None, wheels=[], data=None,
                     next_edit_sessions=_sessions(tmp_path / "s.jsonl.gz"))
    with tarfile.open(boot) as tar:
        assert NEXT_EDIT_SESSIONS in tar.getnames()
    w = job.Work(tmp_path / "work")
    ran: list[list[str]] = []

    def fake_run(cmd: list[str], env: dict[str, str], stdin: Any, timeout: float | None) -> Any:
        ran.append(cmd)
        return subprocess.CompletedProcess(cmd, 0)

    monkeypatch.setattr(job.subprocess, "run", fake_run)
    job.run_eval(w, {"eval": {**recipe["eval"], "next_edit": "data/next-edit/cases.jsonl.gz"}}, seconds=90.0)
    assert [c[2:4] for c in ran] == [["engine.train.edit_tokens", str(w.boot / NEXT_EDIT_SESSIONS)],
                                     ["evals", "next-edit"], ["evals", "humaneval-infill"]]
    et = ran[0]
    assert et[et.index("--model") + 1] == job.EMBEDDED and et[et.index("--examples") + 1] == "32"
    assert job.partial_eval(tmp_path / "none", "edit-tokens") == {"split": "edit-tokens", "n": 0, "partial": True}


def test_a_warm_restart_takes_the_recipes_emphasis_and_a_strict_resume_refuses_a_change() -> None:
    from dataclasses import asdict
    from types import SimpleNamespace

    from engine.train.recipe.window import window_config
    from engine.train.train_state import check_resumable
    from engine.train.trainer import TrainConfig

    old = {"model": "qwen2.5-coder-0.5b", "steps": 952, "mix": {"git": 0.45}}  # a checkpoint from before
    d = window_config(old, None, step=952, kind="nvidia-h200", restart=True,
                      recipe_config={"edit_emphasis": 2.0, "mix": {"git": 0.45}})
    assert d["edit_emphasis"] == 2.0 and d["schedule_start"] == 952 and d["strict_resume"] is False
    corpus = SimpleNamespace(index={})
    before = {k: v for k, v in asdict(TrainConfig()).items() if k != "edit_emphasis"}  # a checkpoint from before
    check_resumable(TrainConfig(edit_emphasis=2.0), {"config": before}, corpus)  # no field: nothing to compare
    with pytest.raises(ValueError, match=r"resume would change the run \(edit_emphasis: 1.0 -> 2.0\)"):
        check_resumable(TrainConfig(edit_emphasis=2.0), {"config": {**before, "edit_emphasis": 1.0}}, corpus)
