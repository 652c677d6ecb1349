"""A GPU window planned to the second (issue 23 §2): the window's clock, steps fitted to it, warm restarts
that extend a kept checkpoint, the task mix's ended multi-line middles, and `gpu_recipe plan`."""

from __future__ import annotations

import json
import random
import time
from dataclasses import asdict
from pathlib import Path

import pytest
import torch

from engine.tokenizer import Tokenizer
from engine.train.recipe import UPLOAD_LIMIT, MiB
from engine.train.recipe.plan import Costs, estimate_uploads, format_plan, plan_window
from engine.train.recipe.throughput import device_kind, record_throughput, seconds_per_step
from engine.train.recipe.window import parse_start, read_window, train_deadline, window_config, write_window
from engine.train.schedule import fit_steps, lr_at
from engine.train.stream import ExampleStream
from engine.train.tasks import BLOCK_LINES, Budget, fit_block, make_fim
from engine.train.trainer import TrainConfig, train
from tests.test_train_smoke import synth_tree

TINY = dict(model="tiny", seq_len=192, block_size=8, max_canvas=32, chars_per_token=1.0, batch_size=2,
            lr=5e-3, embed_lr=5e-3, rank=4, alpha=8, val_examples=2, threads=1, seed=0,
            mix={"fim": 0.5, "fim:block": 0.2, "continue": 0.3})


# ---- schedule ------------------------------------------------------------------------------------
def test_warm_restart_schedule_is_the_schedule_shifted() -> None:
    base = TrainConfig(steps=100, warmup=10, min_lr_ratio=0.1)
    ext = TrainConfig(steps=900 + 100, warmup=10, min_lr_ratio=0.1, schedule_start=900)
    for s in range(100):
        assert lr_at(900 + s, ext) == pytest.approx(lr_at(s, base))
    assert lr_at(900, ext) == pytest.approx(0.1)  # a new warmup from the restart step
    assert lr_at(909, ext) == pytest.approx(1.0)
    assert lr_at(999, ext) == pytest.approx(0.1, abs=1e-3)  # the cosine ends with the window


def test_fit_steps() -> None:
    assert fit_steps(30, 100.0, 0.5, 3000) == 30 + int(100 * 0.97 / 0.5)
    assert fit_steps(30, -5.0, 0.5, 3000) == 31  # past the deadline: one more step, then the backstop
    assert fit_steps(30, 100.0, 0.0, 3000) == 3000


def test_deadline_fit_follows_a_speed_change(monkeypatch: pytest.MonkeyPatch) -> None:
    """The speed halves a third of the way in (a bench starts beside the job): one fit at warmup would
    plan twice the steps the deadline allows and the cosine would be cut off at about 70 %; the refits
    end it within a few per cent of the deadline."""
    import engine.train.schedule as schedule

    def simulate(refits: bool) -> tuple[int, int]:
        clock = [0.0]
        monkeypatch.setattr(schedule.time, "time", lambda: clock[0])
        cfg = TrainConfig(steps=100_000, warmup=10, deadline=100.0, fit_deadline=True)
        fit = schedule.DeadlineFit()
        if not refits:
            fit.left = []
        step = 0
        while step < cfg.steps and clock[0] < cfg.deadline:
            clock[0] += 0.05 if clock[0] < 33 else 0.1
            step += 1
            if fit.due(step, cfg):
                cfg.steps = fit.fit(step, clock[0], clock[0] / step, cfg)
        return step, cfg.steps

    ran, planned = simulate(refits=False)
    assert planned > 1.4 * ran  # cut off at about 70 %: the cosine never reached its floor
    ran, planned = simulate(refits=True)
    assert ran == planned and 0.9 * 1340 < ran < 1340  # 33 s at 0.05 + 67 s at 0.1 = 1,330 steps


def test_kind_clock_and_table(tmp_path: Path) -> None:
    assert device_kind("NVIDIA H200") == "nvidia-h200"
    assert device_kind("NVIDIA H100 80GB HBM3") == "nvidia-h100-x1"
    assert parse_start("now-75", now=1000.0) == 925.0 and parse_start("now", now=5.0) == 5.0
    assert parse_start("1234.5") == 1234.5
    h200, est = seconds_per_step("nvidia-h200")
    assert not est and 0.5 < h200 < 0.7  # measured: 900 steps in 530 s
    h100, est = seconds_per_step("nvidia-h100-x1")
    assert est and h100 > h200  # unknown: conservative
    table = tmp_path / "t.json"
    table.write_text(Path("engine/train/recipe/throughput.json").read_text())
    assert record_throughput({"kind": "nvidia-h100-x1", "s_per_step": 0.61, "tok_s": 56000}, table)
    assert seconds_per_step("nvidia-h100-x1", json.loads(table.read_text())) == (0.61, False)
    # a measured kind is not overwritten by a later run (unless forced)
    assert not record_throughput({"kind": "nvidia-h100-x1", "s_per_step": 0.9}, table)
    assert record_throughput({"kind": "nvidia-h100-x1", "s_per_step": 0.9}, table, force=True)


def test_window_config_fits_steps_from_the_window_start(tmp_path: Path) -> None:
    w = write_window(tmp_path, start=1000.0, budget_s=900, train_end_s=700, eval_s=60)
    assert read_window(tmp_path) == w and train_deadline(w) == 1700.0
    # max_minutes counts from the window's start, not the trainer's
    assert train_deadline(w, max_minutes=5) == 1300.0
    table = {"kinds": {"k": {"s_per_step": 0.5, "estimate": False}}, "default": {"s_per_step": 1.0}}
    recipe = {**TINY, "steps": 3000, "warmup": 50, "max_minutes": 0}
    d = window_config(recipe, w, step=0, kind="k", recipe_config=recipe, restart=False, now=1200.0, table=table)
    assert d["deadline"] == 1700.0 and d["fit_deadline"] and d["max_minutes"] == 0
    assert d["steps"] == int((1700 - 1200 - 15) / 0.5)  # (deadline - now - model load) / s per step
    # a warm restart of a finished checkpoint: its config, the recipe's mix, a new schedule from its step
    ck = {**TINY, "steps": 900, "warmup": 50, "lr": 8e-4, "mix": {"fim": 1.0}, "max_canvas": 16,
          "max_minutes": 6.5}  # the H200 run's budget: the old window's, not this one's
    d = window_config(ck, w, step=900, kind="k", recipe_config={**recipe, "max_edit_canvas": 64}, restart=True,
                      now=1200.0, table=table)
    assert d["max_edit_canvas"] == 64  # the recipe's rewrite canvas reaches a checkpoint trained without it
    d = window_config(ck, w, step=900, kind="k", recipe_config=recipe, restart=True, now=1200.0, table=table)
    assert d["schedule_start"] == 900 and d["steps"] == 900 + int(485 / 0.5) and d["warmup"] == 30
    assert d["mix"] == TINY["mix"] and d["max_canvas"] == 32 and d["strict_resume"] is False
    assert d["rank"] == 4 and d["seed"] == 0  # shapes and the data stream's seed stay the checkpoint's
    assert d["deadline"] == 1700.0 and d["max_minutes"] == 0
    s = window_config(ck, w, step=900, kind="k", recipe_config=recipe, restart=True, now=1200.0, table=table,
                      sets={"lr": 3e-4, "max_minutes": 4})
    assert s["lr"] == 3e-4 and s["deadline"] == 1240.0  # --set wins; max_minutes from the window's start
    # a recipe's own max_minutes is a backstop: the plan's train_end_s rules the window (not 1000 + 9 min)
    nine = window_config({**recipe, "max_minutes": 9}, w, step=0, kind="k", recipe_config=recipe, restart=False,
                         now=1200.0, table=table)
    assert nine["deadline"] == 1700.0 and nine["max_minutes"] == 0
    no_end = {k: v for k, v in w.items() if k != "train_end_s"}
    assert window_config({**recipe, "max_minutes": 9}, no_end, step=0, kind="k", recipe_config=recipe,
                         restart=False, now=1200.0, table=table)["deadline"] == 1540.0
    # an exact resume inside the window (a checkpoint of this window): its own steps, the window's deadline
    mid = {**d, "steps": 1500}
    e = window_config(mid, w, step=1200, kind="k", recipe_config=recipe, restart=False, now=1400.0, table=table)
    assert e["steps"] == 1500 and e["deadline"] == 1700.0


def test_trainer_fits_the_cosine_to_the_deadline(tmp_path: Path) -> None:
    torch.set_num_threads(1)
    from engine.train.corpus import CorpusOptions, build_corpus

    corpus = tmp_path / "corpus"
    build_corpus([synth_tree(tmp_path / "src", 30)], corpus, Tokenizer.byte_level(), tokenizer_name="byte",
                 opts=CorpusOptions(val_fraction=0.1))
    deadline = time.time() + 12.0
    cfg = TrainConfig.from_dict({**TINY, "corpus": str(corpus), "out": str(tmp_path / "run"), "steps": 100_000,
                                 "warmup": 3, "val_every": 100_000, "save_every": 100_000,
                                 "deadline": deadline, "fit_deadline": True})
    s = train(cfg)
    assert time.time() < deadline + 3.0  # stopped by its deadline (one step over at most), not after 100K steps
    assert 3 < s["steps"] < 100_000
    saved = json.loads((tmp_path / "run" / "adapter.json").read_text())["training"]
    assert saved["steps"] < 100_000  # the fitted schedule is what the run recorded
    assert s["steps"] >= 0.7 * saved["steps"], (s["steps"], saved["steps"])  # the cosine (nearly) ran out


def test_warm_restart_continues_the_checkpoint(tmp_path: Path) -> None:
    """A kept checkpoint whose cosine ended, extended: same weights and data stream, a new warmup + cosine."""
    torch.set_num_threads(1)
    from engine.train.corpus import CorpusOptions, build_corpus
    from engine.train.train_state import latest_checkpoint, read_state

    corpus = tmp_path / "corpus"
    build_corpus([synth_tree(tmp_path / "src", 30)], corpus, Tokenizer.byte_level(), tokenizer_name="byte",
                 opts=CorpusOptions(val_fraction=0.1))
    base = {**TINY, "corpus": str(corpus), "out": str(tmp_path / "run"), "steps": 6, "warmup": 2,
            "val_every": 100, "save_every": 6, "mix": {"fim": 0.6, "continue": 0.4}}
    first = train(TrainConfig.from_dict(base))
    state = read_state(latest_checkpoint(tmp_path / "run" / "ckpt"))
    win = {"start": time.time(), "train_end_s": 3600}
    d = window_config(state["config"], win, step=6, kind="cpu", recipe_config=TINY, restart=True,
                      table={"kinds": {}, "default": {"s_per_step": 60.0}})  # 59 new steps' worth
    assert d["steps"] == 6 + 59 and d["schedule_start"] == 6 and d["fit_deadline"]
    d.update(fit_deadline=False, warmup=2, steps=11)  # a short run here
    second = train(TrainConfig.from_dict(d), resume=True)
    assert second["resumed_from"] == 6 and second["steps"] == 11
    hist = second["history"]
    assert [h["step"] for h in hist] == list(range(1, 12))  # one loss curve, continued
    assert hist[5] == first["history"][5]
    assert hist[6]["lr"] == pytest.approx(5e-4 * 0.5)  # step 7: the first of the new warmup (lr 5e-4, 2 steps)
    assert hist[7]["lr"] == pytest.approx(5e-4)
    assert second["tokens"] > first["tokens"]  # the window's tokens add to the checkpoint's


# ---- the task mix: whole-line and multi-line middles that end -------------------------------------
CODE = "".join(f"def f{i}(x):\n    y = x + {i}\n    if y > {i * 2}:\n        return y\n    return -y\n\n"
               for i in range(40))


def test_block_middles_are_whole_lines_ending_with_eom() -> None:
    tok = Tokenizer.byte_level()
    budget = Budget(1024, 32, 256, 1.0)
    rng = random.Random(0)
    sizes = []
    for _ in range(300):
        ex = make_fim(tok, CODE, "a.py", "python", rng, budget, how="block")
        assert ex is not None and ex.kind == "fim:block"
        mid, pre = ex.meta["middle"], ex.meta["prefix"]
        assert mid.endswith("\n") and (pre == "" or pre.endswith("\n")) and mid.strip()
        assert CODE.count(pre + mid) >= 1 and CODE.find(mid) >= 0
        body = [t for t in ex.target if t != tok.special.pad]
        assert body == [*tok.encode(mid), tok.special.eom]  # the middle, then the end-of-middle token
        assert len(ex.target) % 32 == 0 and ex.target[len(body):] == [tok.special.pad] * (len(ex.target) - len(body))
        sizes.append(mid.count("\n"))
    assert min(sizes) == 1 and max(sizes) >= 9 and max(sizes) <= BLOCK_LINES
    assert sum(s == 1 for s in sizes) >= 20 and sum(s >= 5 for s in sizes) >= 60  # whole lines and blocks


def test_long_blocks_are_cut_at_lines_not_dropped() -> None:
    tok = Tokenizer.byte_level()
    a, b = 0, CODE.index("def f3")
    got = fit_block(tok, CODE, a, b, 60)
    assert got is not None and got[0] == 0 and CODE[got[1] - 1] == "\n" and len(tok.encode(CODE[:got[1]])) <= 60
    assert len(tok.encode(CODE[: CODE.index("\n", got[1]) + 1])) > 60  # the next whole line would not fit
    ex = make_fim(tok, CODE, "a.py", "python", random.Random(1), Budget(1024, 8, 24, 1.0), how="block")
    assert ex is None or len([t for t in ex.target if t != tok.special.pad]) <= 24


def test_the_gpu_mix_draws_block_middles() -> None:
    from engine.train.corpus import Doc

    cfg = json.loads(Path("engine/train/configs/gpu_smollm2.json").read_text())
    assert cfg["mix"].get("fim:block", 0) >= 0.1
    tok = Tokenizer.byte_level()
    s = ExampleStream([Doc("a.py", "python", CODE, 0)], tok, Budget(1024, 32, 256, 1.0), cfg["mix"], 0)
    kinds = [s.one().kind for _ in range(200)]
    assert 15 <= kinds.count("fim:block") <= 60


# ---- the plan --------------------------------------------------------------------------------------
def _check(p: dict, budget: float) -> None:
    c = Costs()
    assert p["total_s"] <= budget - c.margin_s + 1e-6
    cmds = p["commands"]
    for a, b in zip(cmds, cmds[1:], strict=False):
        assert b["start_s"] >= a["end_s"] and b["start_s"] - a["end_s"] <= 30  # the machine stays warm
        assert b["start_s"] - a["end_s"] - b["upload_bytes"] / MiB / c.upload_mib_s <= 30
    for s in cmds:
        assert s["upload_bytes"] <= UPLOAD_LIMIT and s["seconds"] <= 600
    assert sum(s["seconds"] for s in cmds) < p["total_s"]


def test_plan_900s_h200_with_the_kept_checkpoint_in_the_tree() -> None:
    tree = 42_500_000  # main today: 21 MB + the kept 30 MB checkpoint
    ups = estimate_uploads(tree)
    assert len(ups) == 4 and all(tree + u["bytes"] <= UPLOAD_LIMIT for u in ups)
    p = plan_window(900, "nvidia-h200", ups, tree, resume_from="engine/weights/gpu-ckpt")
    _check(p, 900)
    first = p["commands"][0]["command"]
    assert "receive runs/gpu-pack/up1" in first and "resume --from engine/weights/gpu-ckpt --extend" in first
    assert f"--train-end-s {p['train_end_s']:.0f}" in first and "--window-start now-" in first
    assert " bench --budget-s " in first
    last_upload = p["commands"][3]["command"]
    assert "receive runs/gpu-pack/up4" in last_upload and "poll --wait" in last_upload
    assert p["commands"][-1]["command"] == "give_back"
    assert 400 < p["train_s"] < 700 and p["steps"] == int(p["train_s"] / 0.589)
    assert p["tokens"] > 25e6 and p["dropped"] == []
    assert "total" in format_plan(p)


def test_plan_carries_a_checkpoint_from_outside_the_tree() -> None:
    tree = 12_500_000
    p = plan_window(900, "nvidia-h200", estimate_uploads(tree), tree, resume_from=".devcarry/resume",
                    resume_carry=30_141_040)
    _check(p, 900)
    cmds = [s["command"] for s in p["commands"]]
    assert "start --window-start" in cmds[0]  # the job starts at once; the checkpoint joins it later
    i = next(k for k, c in enumerate(cmds) if "restore --from .devcarry/resume --extend" in c)
    base_done = next(k for k, s in enumerate(p["commands"]) if "base is complete" in s["what"])
    assert i <= base_done and ".devcarry/resume" in p["commands"][i]["carry"]
    if i == base_done:  # riding with the last upload: restored before the base completes
        assert cmds[i].index("restore") < cmds[i].index("receive")


def test_plan_priorities_when_time_is_short() -> None:
    tree = 12_500_000
    ups = estimate_uploads(tree)
    full = plan_window(900, "nvidia-h200", ups, tree, parts=("train", "bench", "latency", "kto"))
    assert full["dropped"] == ["kto"] and full["parts"] == ["train", "bench", "latency"]
    long = plan_window(1500, "nvidia-h200", ups, tree, parts=("train", "bench", "latency", "kto"))
    _check(long, 1500)
    assert long["dropped"] == [] and any("align-start --adapter run" in s["command"] for s in long["commands"])
    kto = plan_window(900, "nvidia-h200", ups, tree, parts=("kto", "bench"))
    _check(kto, 900)
    assert any("align-start --adapter shipped" in s["command"] for s in kto["commands"])
    h100 = plan_window(900, "nvidia-h100-x1", ups, tree)
    assert h100["s_per_step_estimate"] and h100["steps"] < full["steps"]
    with pytest.raises(ValueError, match="no room for training"):
        plan_window(300, "nvidia-h200", ups, tree)


def test_plan_cli_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from engine.train.gpu_recipe import main

    assert main(["plan", "--budget-s", "900", "--kind", "nvidia-h200", "--tree-bytes", "12500000", "--from", "",
                 "--pack", str(tmp_path / "none"), "--json"]) == 0
    p = json.loads(capsys.readouterr().out)
    _check(p, 900)
    assert p["kind"] == "nvidia-h200" and p["commands"][0]["carry"] == ["runs/gpu-pack/up1"]
    assert main(["plan", "--budget-s", "900", "--tree-bytes", "12500000", "--from", "",
                 "--pack", str(tmp_path / "none")]) == 0
    assert "run(command=" in capsys.readouterr().out


def test_kept_checkpoint_fits_a_commit() -> None:
    d = asdict(TrainConfig())
    assert d["schedule_start"] == 0 and d["deadline"] == 0.0 and not d["fit_deadline"]


def test_kto_stage_reports_reward_gate_vs_confidence_gate(tmp_path: Path) -> None:
    from engine.train.recipe.align import AlignWork, measure_command, measure_summary
    from engine.train.recipe.plan import kto_sets

    a = AlignWork(tmp_path)
    plan = json.loads(Path("engine/train/configs/gpu_kto.json").read_text())
    cmd = measure_command(a, plan)
    assert cmd is not None and cmd[2:5] == ["edit_server", "align", "measure"]
    assert cmd[cmd.index("--limit") + 1] == str(plan["measure_limit"]) and "--coverage" in cmd
    assert cmd[cmd.index("--adapter") + 1] == str(a.kto)
    assert measure_command(a, {k: v for k, v in plan.items() if k != "measure_limit"}) is None
    assert measure_summary(a) is None
    rows = [{"set": "HumanEval, aligned outputs", "gate": g, "at": "coverage 50%", "precision": p}
            for g, p in (("confidence", 0.4), ("kto", 0.55))]
    (a.dir / "measure").mkdir(parents=True)
    (a.dir / "measure" / "measure.json").write_text(json.dumps({"at_coverage": rows, "gates": [], "quality": []}))
    assert measure_summary(a)["at_coverage"] == rows
    sets = dict(kv.split("=") for kv in kto_sets(300).split())
    assert int(sets["measure_limit"]) >= 10 and int(sets["selfplay"]) > int(sets["heldout_selfplay"])
    assert float(sets["kto.max-minutes"]) * 60 < 300
    big = dict(kv.split("=") for kv in kto_sets(900).split())  # a whole window: more self-play, not more passes
    assert int(big["selfplay"]) > int(sets["selfplay"])
    assert int(big["kto.steps"]) <= 3 * int(big["selfplay"]) / 16  # many more passes overfit (docs/QUALITY.md)
