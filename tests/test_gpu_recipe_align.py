"""The GPU recipe's alignment stage, rehearsed on the CPU with the tiny model, end to end.

pack (with a feedback store for the KTO data) → receive → align-start (the detached job builds the corpus,
runs ``python -m edit_server align data`` = self-play + the packed feedback, then ``align kto``; the GPU image's
missing packages blocked) → SIGKILL mid-KTO → align-collect in parts (damaged parts refused) → a fresh work dir →
receive + align-resume → done → align-collect → align-export: the aligned adapter loads on the tiny model and
scores with its reward calibration, and equals an uninterrupted `align kto` on the same data.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import signal
import time
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file

from engine.train.recipe import align
from engine.train.recipe.pack import pack
from engine.train.recipe.parts import PartsError
from engine.train.recipe.receive import receive
from engine.train.recipe.workdir import RecipeError
from tests.test_gpu_recipe_cycle import CONFIG, _blocker
from tests.test_train_smoke import synth_tree

STEPS, SAVE_EVERY, KILL_AFTER = 12, 4, 4
PLAN: dict[str, Any] = {
    "model": "tiny-random", "device": "cpu", "threads": 1, "seed": 0, "selfplay": 40, "heldout_selfplay": 16,
    "measure_limit": 0,  # the job's `align measure` (held-out self-play; no HumanEval in this pack) under the
    # image's packages: it once imported msgspec there and failed in every window
    "kto": {"steps": STEPS, "batch-size": 4, "lr": 2e-2, "beta": 1, "rank": 4, "alpha": 8, "top-layers": 1,
            "z0-pairs": 2, "max-prompt": 64, "max-canvas": 16, "eval-every": 6, "save-every": SAVE_EVERY,
            "eval-examples": 8, "min-count": 2}}


def _wait(work: Path, until: Any, timeout: float = 240.0) -> dict[str, Any]:
    t0 = time.time()
    while time.time() - t0 < timeout:
        st = align.status(work)
        if until(st):
            return st
        time.sleep(0.1)
    raise AssertionError(f"timed out; last status {align.status(work)}\n{_log(work)}")


def _log(work: Path) -> str:
    p = work / "align" / "job.log"
    return p.read_text(errors="replace")[-4000:] if p.is_file() else "(no log)"


def _feedback_store(path: Path) -> Path:
    from edit_server.selectivity.feedback import FeedbackStore
    from engine.templates import FimPrompt

    fb = FeedbackStore(path)
    for i in range(8):
        good = i % 2 == 0
        p = FimPrompt(f"def f{i}(a, b):\n    return ", "\n", path=f"fb{i}.py")
        fb.offered(f"s{i}", "fim", f"file:///fb{i}.py", 0.5, prompt=p, completion="a + b" if good else "zz(")
        fb.shown(f"s{i}")
        fb.accepted(f"s{i}") if good else fb.typed_over(f"file:///fb{i}.py")
    fb.close()
    return path


def test_align_stage_start_kill_collect_resume_export(tmp_path: Path) -> None:
    torch.set_num_threads(1)
    src = synth_tree(tmp_path / "src", 30)
    plan = pack(tmp_path / "pack", CONFIG, base=None, wheels=[], sources=[str(src)],
                corpus_options={"val_fraction": 0.1}, eval_limit=0, tree=0,
                align_feedback=[_feedback_store(tmp_path / "fb.sqlite3")])
    up = tmp_path / "pack" / "up1"
    assert plan["uploads"][0]["files"] == ["boot.tar.xz"]
    env = _blocker(tmp_path / "block")
    # -- window 1: align on the (random) tiny model, killed mid-KTO -----------------------------------
    w1 = tmp_path / "gpu1"
    receive(w1, [up])
    assert (w1 / "boot" / "code" / "edit_server" / "cli" / "align_kto.py").is_file()
    assert len(list((w1 / "boot" / "align" / "feedback").glob("*.sqlite3"))) == 1
    t_start = time.time()
    pid = align.start(w1, PLAN, env=env)["pid"]
    with pytest.raises(RecipeError, match="already running"):
        align.start(w1, PLAN, env=env)
    st = _wait(w1, lambda s: s["phase"] in ("kto", "failed") or not s["running"])
    assert st["phase"] == "kto", f"{st}\n{_log(w1)}"
    t_data = time.time() - t_start
    data = json.loads((w1 / "align" / "data" / "summary.json").read_text())
    assert data["counts"]["train"]["fim"]["desirable"] > 0 and data["counts"]["train"]["fim"]["undesirable"] > 0
    assert data["feedback"] and data["selfplay"]["n"] == PLAN["selfplay"]
    assert sum(data["counts"][s]["sources"].get("feedback", 0) for s in ("train", "heldout")) == 8  # the packed store
    os.killpg(pid, signal.SIGSTOP)  # short slices: the kill lands mid-run, after a checkpoint
    t0 = time.time()
    while (st := align.status(w1))["running"] and (st["ckpt_step"] or 0) < KILL_AFTER and time.time() - t0 < 240:
        os.killpg(pid, signal.SIGCONT)
        time.sleep(0.05)
        os.killpg(pid, signal.SIGSTOP)
    assert st["running"] and st["phase"] == "kto", f"no KTO checkpoint before the kill: {st}\n{_log(w1)}"
    os.killpg(pid, signal.SIGKILL)
    st = _wait(w1, lambda s: not s["running"], 20)
    assert st["phase"] == "died (kto)" and KILL_AFTER <= st["ckpt_step"] < STEPS and st["step"] >= st["ckpt_step"], st
    # -- collect in parts (as every align-poll does) ---------------------------------------------------
    got = align.collect(w1, tmp_path / "out1", part_bytes=20_000)
    assert got["warnings"] == [] and got["align"]["parts"] >= 2 and not got["align"]["final"], got
    step = got["align"]["step"]
    assert step == st["ckpt_step"] and step % SAVE_EVERY == 0
    again = align.collect(w1, tmp_path / "out1", part_bytes=20_000)  # nothing changed: the same folder
    assert again["align"]["dir"] == got["align"]["dir"] and len([p for p in (tmp_path / "out1").glob("align-*") if p.is_dir()]) == 1
    parts = sorted((tmp_path / "out1" / got["align"]["dir"]).glob("*.part*"))
    assert len(parts) == got["align"]["parts"] and all(p.stat().st_size <= 20_000 for p in parts)
    bad = tmp_path / "bad"
    shutil.copytree(tmp_path / "out1", bad)
    part = next(bad.glob("align-*/*.part001"))
    part.write_bytes(b"x" + part.read_bytes()[1:])
    with pytest.raises(PartsError, match="sha256"):
        align.restore(bad, tmp_path / "gpu-bad")
    with pytest.raises(PartsError, match="not finished"):
        align.export(tmp_path / "out1", tmp_path / "early" / "kto")
    # -- window 2: a fresh work dir, the same pack, the collected parts --------------------------------
    w2 = tmp_path / "gpu2"
    receive(w2, [up])
    t_resume = time.time()
    res = align.resume(tmp_path / "out1", w2, env=env)
    assert res["step"] == step and res["plan"]["kto"] == PLAN["kto"]
    st2 = _wait(w2, lambda s: not s["running"])
    t_resume = time.time() - t_resume
    assert st2["phase"] == "done" and st2["step"] == STEPS, f"{st2}\n{_log(w2)}"
    log2 = (w2 / "align" / "job.log").read_text(errors="replace")
    assert "resumed KTO" in log2 and "align data" not in log2  # continued from the checkpoint, same data
    from engine.train.gpu_recipe import main

    assert main(["align-poll", "--work", str(w2), "--wait", "0", "--to", str(tmp_path / "out2")]) == 0
    final = json.loads((tmp_path / "out2" / "align-status.json").read_text())
    assert final["status"]["phase"] == "done" and final["align"]["final"] and final["align"]["step"] == STEPS
    assert "align measure exited" not in log2, log2[-3000:]
    assert (w2 / "align" / "measure" / "measure.json").is_file()
    assert align.measure_summary(align.AlignWork(w2))
    exported = align.export(tmp_path / "out2", tmp_path / "exported" / "kto")
    assert set(exported) >= {".safetensors", ".json", ".gate.json"}
    # -- the collected adapter loads and scores; it equals an uninterrupted run on the same data -------
    from edit_server.cli import main as edit_server
    from edit_server.selectivity import kto_gate
    from engine.engine import Engine
    from engine.loading.stacked import AlignedEngine
    from engine.reward import RewardScorer
    from engine.specs import random_checkpoint
    from engine.templates import FimPrompt

    adapter = tmp_path / "exported" / "kto"
    eng = AlignedEngine.from_engine(Engine.from_checkpoint(random_checkpoint("tiny"), device="cpu"), adapter)
    rw = RewardScorer(eng).score_text(FimPrompt("def g(a, b):\n    return ", "\n", path="t.py"), "a + b")
    assert math.isfinite(rw.score) and rw.adapter == str(adapter)
    cal = kto_gate.calibration_for(adapter)
    assert cal is not None and cal.thresholds and 0.0 <= cal.probability(next(iter(cal.thresholds)), rw.score) <= 1.0
    ref = tmp_path / "ref" / "kto"
    flags = [str(x) for k, v in PLAN["kto"].items() for x in (f"--{k}", v)]
    assert edit_server(["align", "kto", "--data", str(w2 / "align" / "data"), "--out", str(ref), "--model",
                        "tiny-random", "--device", "cpu", "--threads", "1", "--no-progress", *flags]) == 0
    a, b = load_file(f"{ref}.safetensors"), load_file(f"{adapter}.safetensors")
    assert sorted(a) == sorted(b) and len(a) > 4
    assert all(torch.allclose(a[k], b[k], atol=1e-6) for k in a)
    summary = json.loads(Path(exported[".summary.json"]).read_text())
    assert summary["steps"] == STEPS and [h["step"] for h in summary["history"]] == list(range(1, STEPS + 1))
    print(f"align rehearsal: start -> kto phase {t_data:.1f} s (corpus + self-play {PLAN['selfplay']}), "
          f"resume -> done {t_resume:.1f} s")



def _boot(w: Path) -> Path:
    (w / "boot" / "code").mkdir(parents=True)
    (w / "boot" / "recipe.json").write_text("{}")
    return w


def test_align_start_picks_the_reference_and_refuses_a_mismatched_plan(tmp_path: Path) -> None:
    """``default`` aligns against the training run's adapter when there is one, else the shipped one (copied
    into the work dir, so a later resume depends on neither); a checkpoint of another plan is refused."""
    w = _boot(tmp_path / "gpu")
    plan = {**PLAN, "model": "default"}

    def start(work: Path, plan: dict[str, Any] | None, adapter: str = "") -> dict[str, Any]:
        got = align.start(work, plan, adapter=adapter, python="/bin/true")  # no job: what start prepares
        _wait(work, lambda s: not s["running"], 10)
        return got

    assert start(w, plan)["plan"]["reference"] == str(align.SHIPPED)
    ref = w / "align" / "reference.safetensors"
    assert ref.read_bytes() == align.SHIPPED.with_suffix(".safetensors").read_bytes()
    shutil.rmtree(w / "align")
    (w / "run").mkdir()
    (w / "run" / "adapter.safetensors").write_bytes(b"run weights")
    (w / "run" / "adapter.json").write_text("{}")
    assert start(w, plan)["plan"]["reference"] == str(w / "run" / "adapter")
    assert ref.read_bytes() == b"run weights"
    # the copied reference stays what the run aligns against, whatever a later start names
    assert start(w, plan, "shipped")["plan"]["reference"] == str(w / "run" / "adapter")
    (w / "align" / "kto.ckpt").mkdir()
    with pytest.raises(RecipeError, match="another plan"):
        start(w, {**plan, "selfplay": 1})
    assert start(w, plan)["plan"]["selfplay"] == PLAN["selfplay"]  # the same plan goes on
    with pytest.raises(RecipeError, match="no adapter"):
        start(_boot(tmp_path / "other"), plan, str(tmp_path / "missing"))
    with pytest.raises(RecipeError, match="no plan"):
        start(_boot(tmp_path / "empty"), None)
