"""Windows compound for the Qwen base (issues 23 §2, 24 item 5): its checkpoint is committable and kept.

- ``ckpt_moments: bfloat16``: the AdamW moments are written in bf16 (training keeps fp32; resume casts
  back), the byte count formula matches the real file, resuming continues training;
- `keep` stores a parted base's checkpoint in its own folder (``engine/weights/gpu-ckpt-<base>``), never
  over another base's;
- `plan --base`: a kept checkpoint makes the window a warm restart (carried once, held out of the tree),
  still within the 15-minute window and the 64 MiB uploads; the SmolLM2 window holds it out too.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

import pytest
import torch

from engine.tokenizer import Tokenizer
from engine.train.corpus import CorpusOptions, build_corpus
from engine.train.recipe import BACK_FILES, COLLECT_PART, COMMIT_MAX, UPLOAD_LIMIT, keep_dir
from engine.train.recipe import base_parts as bp
from engine.train.recipe.collect import FORMAT, checkpoint_bytes, keep
from engine.train.recipe.parts import PartsError, split
from engine.train.train_state import latest_checkpoint, read_checkpoint, restore
from engine.train.trainer import TrainConfig, train
from tests.test_train_smoke import synth_tree

ROOT = Path(__file__).resolve().parents[1]
NAME = "qwen2.5-coder-0.5b"
QWEN_CONFIG = ROOT / "engine" / "train" / "configs" / "gpu_qwen05b_bd3.json"
TINY: dict[str, Any] = dict(model="tiny", seq_len=160, block_size=8, max_canvas=32, chars_per_token=1.0,
                            batch_size=2, steps=4, lr=5e-3, embed_lr=5e-3, warmup=1, rank=4, alpha=8,
                            val_every=4, val_examples=2, save_every=2, threads=1,
                            mix={"fim": 0.6, "edit": 0.2, "noedit": 0.2})


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("qk")
    build_corpus([synth_tree(d / "src", 12)], d / "c", Tokenizer.byte_level(), tokenizer_name="byte",
                 opts=CorpusOptions(val_fraction=0.1))
    return d / "c"


def _moments(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {k: t for k, t in tensors.items() if k.startswith("optim/") and not k.endswith("/step")}


def test_ckpt_moments_is_validated() -> None:
    with pytest.raises(ValueError, match=r"ckpt_moments: 'float16' is not one of float32, bfloat16"):
        TrainConfig.from_dict({"ckpt_moments": "float16"})
    assert TrainConfig().ckpt_moments == "float32"


def test_bf16_moments_size_formula_and_resume(corpus: Path, tmp_path: Path) -> None:
    torch.set_num_threads(1)
    runs = {}
    for moments in ("float32", "bfloat16"):
        cfg = {**TINY, "ckpt_moments": moments, "corpus": str(corpus), "out": str(tmp_path / moments)}
        s = train(TrainConfig.from_dict(cfg), progress=False)
        assert s["steps"] == 4
        path = latest_checkpoint(tmp_path / moments / "ckpt")
        tensors, state = read_checkpoint(path)
        runs[moments] = (cfg, path, tensors, state)
    cfg32, path32, t32, s32 = runs["float32"]
    cfg16, path16, t16, s16 = runs["bfloat16"]
    assert s16["ckpt_moments"] == "bfloat16" and s32["ckpt_moments"] == "float32"
    assert s16["config"]["ckpt_moments"] == "bfloat16"
    m16, m32 = _moments(t16), _moments(t32)
    assert m16 and sorted(m16) == sorted(m32) and {k.rsplit("/", 1)[1] for k in m16} == {"exp_avg", "exp_avg_sq"}
    assert all(t.dtype == torch.bfloat16 for t in m16.values())
    assert all(torch.equal(m16[k], m32[k].to(torch.bfloat16)) for k in m16)  # same run, only the file's dtype
    steps = [t for k, t in t16.items() if k.endswith("/step")]
    assert steps and all(t.dtype == torch.float32 and t.dim() == 0 for t in steps)  # `step` as it is
    adapter = [t for k, t in t16.items() if k.startswith("adapter/")]
    assert adapter and all(t.dtype == torch.float32 for t in adapter)  # export/serving unchanged
    # the byte count formula against the real tensors (+ a 4-byte step per parameter) and the real file
    for cfg, path, tensors in ((cfg32, path32, t32), (cfg16, path16, t16)):
        got = sum(t.numel() * t.element_size() for k, t in tensors.items() if not k.startswith("rng/"))
        assert 0 <= got - checkpoint_bytes(cfg) < 1024
        rng = sum(t.numel() for k, t in tensors.items() if k.startswith("rng/"))
        assert 0 < path.stat().st_size - checkpoint_bytes(cfg) - rng < 200_000  # + header (JSON)
    saved = checkpoint_bytes(cfg32) - checkpoint_bytes(cfg16)
    assert saved == checkpoint_bytes(cfg32) // 3  # 12 → 8 bytes a trained value
    assert path32.stat().st_size - path16.stat().st_size == pytest.approx(saved, abs=4096)

    # resume from the bf16 moments: fp32 again in memory, equal to the file's values upcast
    from engine.train.lora import apply_lora, mark_trainable
    from engine.train.trainer import base_vocab, load_model

    tc = TrainConfig.from_dict(cfg16)
    model, tok, _ = load_model(tc, torch.device("cpu"), torch.float32)
    apply_lora(model, tc.rank, tc.alpha, tc.targets)
    groups = mark_trainable(model, base_vocab(tok))
    for g in groups:
        for p in g["params"]:
            p.data = p.data.float()
    opt = torch.optim.AdamW(groups, lr=tc.lr, betas=(0.9, 0.95))
    restore(path16, model, opt)
    params = [p for g in opt.param_groups for p in g["params"]]
    rows = s16["optim_rows"]
    for key, v in m16.items():
        _, i, k = key.split("/", 2)
        mem = opt.state[params[int(i)]][k]
        assert mem.dtype == torch.float32 and mem.shape == params[int(i)].shape
        cut = int(rows.get(i, 0))
        assert torch.equal(mem[cut:], v.float()) and not mem[:cut].any()
    # ... and training continues from step 4 (a longer schedule: strict_resume off, as a warm restart)
    more = train(TrainConfig.from_dict({**cfg16, "steps": 6, "strict_resume": False}), resume=True,
                 progress=False)
    assert [h["step"] for h in more["history"]] == list(range(1, 7))
    assert all(math.isfinite(h["loss"]) for h in more["history"][4:])
    t6, s6 = read_checkpoint(latest_checkpoint(tmp_path / "bfloat16" / "ckpt"))
    assert s6["step"] == 6 and all(t.dtype == torch.bfloat16 for t in _moments(t6).values())
    assert any(not torch.equal(t6[k], m16[k]) for k in m16)  # the moments moved on


def test_qwen_checkpoint_is_committable_and_comes_back_in_one_command() -> None:
    from engine.train.recipe.base_window import HEADER_SLACK, collect_fits

    cfg = json.loads(QWEN_CONFIG.read_text())
    assert cfg["ckpt_moments"] == "bfloat16" and cfg["rank"] == 8
    # 4,399,104 LoRA + 43,904 norm + 277 x 896 added-row values; fp32 weights + 2 bf16 moments
    assert checkpoint_bytes(cfg) == (4_399_104 + 43_904 + 277 * 896) * 8 == 37_529_600
    assert checkpoint_bytes({**cfg, "ckpt_moments": "float32"}) == 56_294_400  # the fp32 file: > 50 MB
    assert checkpoint_bytes(cfg) + HEADER_SLACK <= COMMIT_MAX
    c = collect_fits(cfg)
    assert (c["parts"], c["files"]) == (3, 6) and c["files"] <= BACK_FILES
    assert collect_fits({**cfg, "ckpt_moments": "float32"})["parts"] == 4
    rehearsal = json.loads((QWEN_CONFIG.parent / "cpu_qwen05b_rehearsal.json").read_text())
    assert rehearsal["ckpt_moments"] == cfg["ckpt_moments"]


def test_warm_restart_takes_the_recipes_moments() -> None:
    from engine.train.recipe.window import window_config

    d = window_config({**TINY, "ckpt_moments": "float32"}, None, step=40, kind="nvidia-h200",
                      recipe_config={"ckpt_moments": "bfloat16"}, restart=True)
    assert d["ckpt_moments"] == "bfloat16" and d["schedule_start"] == 40
    TrainConfig.from_dict(d)


def _collected(d: Path, model: str, step: int, size: int) -> Path:
    f = d.parent / f"{d.name}-step.safetensors"
    f.parent.mkdir(parents=True, exist_ok=True)
    f.write_bytes(os.urandom(size))
    entry = split(f, d, COLLECT_PART)
    cfg = {**json.loads(QWEN_CONFIG.read_text()), "model": model}
    (d / "manifest.json").write_text(json.dumps({"format": FORMAT, "step": step, "checkpoint": entry,
                                                 "config": cfg, "val": [], "tokens": 0, "seconds": 0.0,
                                                 "corpus": {}}))
    return d


def test_keep_puts_each_base_in_its_own_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert keep_dir(NAME, tmp_path) == tmp_path / "engine" / "weights" / f"gpu-ckpt-{NAME}"
    assert keep_dir("base", tmp_path) == keep_dir("tiny", tmp_path) == tmp_path / "engine" / "weights" / "gpu-ckpt"
    monkeypatch.setattr("engine.train.recipe.collect.keep_dir", lambda m: keep_dir(m, tmp_path))
    q = _collected(tmp_path / "out" / "ckpt-000276", NAME, 276, 100_000)
    smol = _collected(tmp_path / "out2" / "ckpt-000900", "base", 900, 50_000)
    got = keep(smol)
    assert got["dest"] == str(keep_dir("base", tmp_path)) and got["model"] == "base"
    got = keep(q)  # no --to: the manifest's base decides
    assert got["kept"] and got["dest"] == str(keep_dir(NAME, tmp_path)) and got["model"] == NAME
    assert json.loads((keep_dir("base", tmp_path) / "manifest.json").read_text())["step"] == 900  # untouched
    with pytest.raises(PartsError, match=rf"holds a checkpoint of 'base', not of '{NAME}'"):
        keep(q, keep_dir("base", tmp_path))
    assert bp.kept_bases(tmp_path) == (f"engine/weights/gpu-ckpt-{NAME}",)
    assert bp.window_hold(tmp_path) == (*bp.HOLD, f"engine/weights/gpu-ckpt-{NAME}")
    assert bp.window_hold(tmp_path, base=False) == (f"engine/weights/gpu-ckpt-{NAME}",)
    shipped = tmp_path / "engine" / "weights" / "qwen2_5-coder-0_5b-bd3.safetensors"
    shipped.write_bytes(b"x")  # the shipped Qwen adapter is held out of every window too
    assert bp.window_hold(tmp_path, base=False) == (f"engine/weights/gpu-ckpt-{NAME}",
                                                    "engine/weights/qwen2_5-coder-0_5b-bd3.safetensors")


def test_qwen_plan_warm_restarts_from_the_kept_checkpoint(tmp_path: Path) -> None:
    from engine.train.recipe.base_window import base_window
    from engine.train.recipe.throughput import load_throughput

    table = load_throughput()
    cfg = json.loads(QWEN_CONFIG.read_text())
    kept = _collected(tmp_path / "kept", NAME, 276, checkpoint_bytes(cfg) + 300_000)
    carry = sum(p.stat().st_size for p in kept.iterdir())
    tree = 2_800_000
    args = dict(pack=tmp_path / "no-pack", tree=tree, config=cfg, table=table, hold=bp.HOLD)
    first = base_window(NAME, 900, "nvidia-h200", kept=tmp_path / "nothing", **args)
    cont = base_window(NAME, 900, "nvidia-h200", kept=kept, **args)
    assert first["kept"] is None and "start --window-start" in first["commands"][0]["command"]
    assert not any("restore" in c["command"] for c in first["commands"])
    assert cont["kept"]["step"] == 276 and cont["kept"]["bytes"] == carry
    restores = [c for c in cont["commands"] if "restore --from .devcarry/resume --extend" in c["command"]]
    assert len(restores) == 1 and restores[0]["carry"] == [".devcarry/resume"]
    assert restores[0]["upload_bytes"] == tree + carry  # carried once, not with every upload
    assert sum(".devcarry/resume" in c["carry"] for c in cont["commands"]) == 1
    for p, budget in ((first, 900), (cont, 900)):
        assert all(c["upload_bytes"] <= UPLOAD_LIMIT for c in p["commands"])
        assert p["total_s"] <= budget - 30 + 1e-6 and p["max_gap_s"] <= 30
        assert p["committable"] and p["keep_to"] == f"engine/weights/gpu-ckpt-{NAME}"
        assert (p["collect"]["parts"], p["collect"]["files"]) == (3, 6)
    base_ups = [c for c in cont["commands"] if any("gpu-pack-qwen/up" in x for x in c["carry"])]
    assert [c["upload_bytes"] for c in base_ups] == [c["upload_bytes"] for c in first["commands"]
                                                     if any("gpu-pack-qwen/up" in x for x in c["carry"])]
    assert 0 < first["steps"] - cont["steps"] < 30  # one more command: ≈ 20 s less training
    assert restores[0]["end_s"] <= cont["commands"][-3]["start_s"]  # restored before the base completes
    assert any(f"cp -r {kept.resolve()} .devcarry/resume" in c for c in cont["here_before"])
    assert any(f"keep <files_at> --to engine/weights/gpu-ckpt-{NAME}" in c for c in cont["here_after"])
    fresh = base_window(NAME, 900, "nvidia-h200", kept=kept, fresh=True, **args)
    assert fresh["kept"] is None and fresh["steps"] == first["steps"]
    with pytest.raises(ValueError, match="trains 'base', not"):
        base_window(NAME, 900, "nvidia-h200", kept=_collected(tmp_path / "smol", "base", 9, 1000), **args)


def test_smollm2_plan_holds_the_kept_qwen_checkpoint_out(capsys: pytest.CaptureFixture[str],
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    from engine.train.gpu_recipe import main

    held = f"engine/weights/gpu-ckpt-{NAME}"
    monkeypatch.setattr(bp, "kept_bases", lambda root=None: (held,))
    assert main(["plan", "--budget-s", "900", "--kind", "nvidia-h200", "--tree-bytes", "3000000", "--from", "",
                 "--parts", "train"]) == 0
    out = capsys.readouterr().out
    assert f"mv {held} ../edit-server-window-hold/" in out.split("\n")[0]  # first, before the window
    assert f"mv ../edit-server-window-hold/gpu-ckpt-{NAME} {held}" in out.splitlines()[-1]
    assert "mv engine/weights/gpu-ckpt " not in out  # SmolLM2's own checkpoint stays
