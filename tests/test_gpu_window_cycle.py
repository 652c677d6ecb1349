"""Two GPU windows rehearsed on the CPU with the tiny model, through the recipe's CLI stages and with the
GPU image's missing packages blocked: window 1 (receive → start with the window's clock → detached engine
bench → poll/collect: the checkpoint, the measured speed, the bench report, the window) → keep → record;
window 2 on a fresh machine (receive → resume --extend: a warm restart that continues the kept checkpoint's
step, loss curve and tokens with a new schedule fitted to its window)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import torch

from engine.train.gpu_recipe import main
from engine.train.recipe.job import start, start_bench, status
from engine.train.recipe.pack import pack
from engine.train.recipe.receive import receive
from engine.train.recipe.window import read_window
from engine.train.recipe.workdir import read_json
from tests.test_gpu_recipe_cycle import _blocker, _log
from tests.test_train_smoke import synth_tree

CONFIG = dict(model="tiny", seq_len=192, block_size=8, max_canvas=32, chars_per_token=1.0, batch_size=2,
              steps=100_000, lr=5e-3, embed_lr=5e-3, warmup=3, rank=4, alpha=8, val_every=100_000, val_examples=2,
              save_every=100_000, threads=1, mix={"fim": 0.4, "fim:block": 0.2, "edit": 0.2, "continue": 0.2})


def _until_done(work: Path, timeout: float = 150.0) -> dict:
    t0 = time.time()
    while time.time() - t0 < timeout:
        st = status(work)
        if not st["running"] and st["phase"] != "starting":
            return st
        time.sleep(0.2)
    raise AssertionError(f"job still running: {status(work)}\n{_log(work)}")


@pytest.mark.slow  # ≈ 45 s, most of it the two windows' wall-clock deadlines
def test_two_windows_compound(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    torch.set_num_threads(1)
    src = synth_tree(tmp_path / "src", 30)
    plan = pack(tmp_path / "pack", CONFIG, base=None, wheels=[], sources=[str(src)],
                corpus_options={"val_fraction": 0.1}, eval_limit=0, tree=0)
    up = tmp_path / "pack" / "up1"
    assert plan["uploads"][0]["files"] == ["boot.tar.xz"]
    env = _blocker(tmp_path / "block")
    table = {"kinds": {}, "default": {"s_per_step": 0.2, "estimate": True}}
    (tmp_path / "t.json").write_text(json.dumps({"format": "x", **table}))
    monkeypatch.setenv("EDIT_SERVER_GPU_THROUGHPUT", str(tmp_path / "t.json"))
    env["EDIT_SERVER_GPU_THROUGHPUT"] = str(tmp_path / "t.json")
    # -- window 1: started 5 s before this command, training ends 28 s into it -------------------------
    w1 = tmp_path / "gpu1"
    assert receive(w1, [up])["installed"] == ["boot.tar.xz"]
    t0 = time.time()
    start(w1, env=env, window={"start": t0 - 5, "budget_s": 90, "train_end_s": 28, "eval_s": 0, "latency_s": 0})
    bench = start_bench(w1, 30, env=env, extra=["--shapes", "tiny", "--prompts", "32", "--tokens", "4",
                                                 "--graphs", "on", "--device", "cpu"])
    assert bench["bench_pid"] > 0
    st = _until_done(w1)
    assert st["phase"] == "done", _log(w1)
    assert time.time() - t0 < 23 + 8  # the window's deadline (23 s after the start call) + the job's tail
    summary = json.loads((w1 / "run" / "summary.json").read_text())
    cfg1 = json.loads((w1 / "run" / "adapter.json").read_text())["training"]
    assert cfg1["deadline"] == t0 - 5 + 28 and cfg1["fit_deadline"] and cfg1["steps"] < 100_000
    assert summary["steps"] >= 0.7 * cfg1["steps"]  # the fitted cosine (nearly) ran out by the deadline
    out1 = tmp_path / "out1"
    assert main(["poll", "--work", str(w1), "--wait", "0", "--to", str(out1)]) == 0
    got = json.loads((out1 / "status.json").read_text())
    assert got["throughput"]["kind"] == "cpu" and got["throughput"]["steps"] == summary["steps"]
    made = got["examples"]  # the mix as trained comes back: every kind of the config made examples
    assert set(made) == set(CONFIG["mix"]) and all(v["made"] > 0 and v["tries"] >= v["made"] for v in made.values())
    assert sum(v["made"] for v in made.values()) == summary["steps"] * CONFIG["batch_size"]  # one per batch row
    assert got["bench_engine"]["rows"][0]["what"] == "load"  # the engine bench ran while the job trained
    assert any(r["what"] == "decode" for r in got["bench_engine"]["rows"])
    # it waited out the corpus build and says which phase of the job each row ran beside
    assert got["bench_engine"]["waited_s"] >= 0
    assert all(r["job_phase"] not in (None, "corpus", "starting") for r in got["bench_engine"]["rows"])
    assert "bench-gpu-engine" in got["bench_engine_log"]  # the bench's own output comes back with it
    assert got["window"]["train_end_s"] == 28 and len([p for p in out1.rglob("*") if p.is_file()]) <= 8
    # -- here: keep (which records the kind's first measured speed) -----------------------------------
    kept = tmp_path / "weights" / "gpu-ckpt"
    assert main(["keep", str(out1), "--to", str(kept)]) == 0
    measured = json.loads((tmp_path / "t.json").read_text())["kinds"]["cpu"]
    assert measured["estimate"] is False and measured["s_per_step"] == round(got["throughput"]["s_per_step"], 4)
    # -- window 2: a fresh machine extends the kept checkpoint ----------------------------------------
    w2 = tmp_path / "gpu2"
    receive(w2, [up])
    t1 = time.time()
    assert main(["resume", "--work", str(w2), "--from", str(kept), "--extend", "--window-start", "now-2",
                 "--budget-s", "60", "--train-end-s", "20", "--eval-s", "0", "--latency-s", "0"]) == 0
    assert read_window(w2)["extend_from"] == summary["steps"]
    st2 = _until_done(w2)
    assert st2["phase"] == "done", _log(w2)
    s2 = json.loads((w2 / "run" / "summary.json").read_text())
    cfg2 = json.loads((w2 / "run" / "adapter.json").read_text())["training"]
    n1 = summary["steps"]
    assert s2["resumed_from"] == n1 and s2["steps"] > n1 and cfg2["schedule_start"] == n1
    assert cfg2["warmup"] == 30 and cfg2["lr"] == 5e-4 and abs(cfg2["deadline"] - (t1 - 2 + 20)) < 1.5
    hist = s2["history"]
    assert [h["step"] for h in hist] == list(range(1, s2["steps"] + 1))  # one loss curve across windows
    assert hist[:n1] == summary["history"]
    assert hist[n1]["lr"] < hist[n1 - 1]["lr"] * 10 and s2["tokens"] > summary["tokens"]
    log2 = (w2 / "job.log").read_text()
    assert "warm restart at step" in log2 and read_json(w2 / "run" / "throughput.json")["steps"] == s2["steps"] - n1
