"""Tiny-preset smoke training: the masked-token loss falls; checkpoints resume; the CLI runs."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
import torch

from engine.tokenizer import Tokenizer
from engine.train.corpus import build_corpus
from engine.train.lora import load_adapter
from engine.train.schedule import lr_at
from engine.train.trainer import TrainConfig, train

NAMES = ["alpha", "beta", "gamma", "delta", "count", "total", "value", "item"]


def synth_tree(root: Path, n: int, seed: int = 0) -> Path:
    rng = random.Random(seed)
    root.mkdir(parents=True, exist_ok=True)
    for i in range(n):
        lines = ["import os", "import math", ""]
        for f in range(rng.randint(2, 4)):
            a, b = rng.sample(NAMES, 2)
            fn = f"compute_{NAMES[f]}_{i}"
            lines += [f"def {fn}({a}, {b}):", f"    result = {a} + {b} * {rng.randint(2, 9)}",
                      f"    if result > {rng.randint(10, 99)}:", "        return math.sqrt(result)",
                      "    return result", "", "", f"print({fn}(1, 2))", ""]
        (root / f"mod_{i}.py").write_text("\n".join(lines) + "\n")
    return root


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("corpus")
    src = synth_tree(d / "src", 30)
    build_corpus([src], d / "out", Tokenizer.byte_level(), tokenizer_name="byte")
    return d / "out"


def _cfg(corpus: Path, out: Path, **kw: object) -> TrainConfig:
    base = dict(model="tiny", corpus=str(corpus), out=str(out), seq_len=224, block_size=8, max_canvas=48,
                chars_per_token=1.0, batch_size=4, steps=40, lr=5e-3, embed_lr=5e-3, warmup=4, rank=8,
                alpha=16, val_every=20, val_examples=8, save_every=20, threads=1,
                mix={"fim": 0.6, "edit": 0.2, "noedit": 0.1, "continue": 0.1})
    base.update(kw)
    return TrainConfig.from_dict(base)


def test_tiny_training_loss_falls_and_exports(corpus: Path, tmp_path: Path) -> None:
    s = train(_cfg(corpus, tmp_path / "run"), progress=False)
    first, last = s["val"][0]["loss"], s["val"][-1]["loss"]
    assert last < 0.95 * first, (first, last)
    assert s["val"][-1]["masked_acc"] > s["val"][0]["masked_acc"]
    assert s["tok_s"] > 0 and s["steps"] == 40
    # what the GPU recipe's `status` reads
    live = json.loads((tmp_path / "run" / "progress.json").read_text())
    assert (live["step"], live["steps"], live["eta_s"]) == (40, 40, 0) and live["val_loss"] == last
    assert live["tok_s"] > 0 and live["masked_acc"] is not None and live["loss_avg10"] is not None
    tensors, meta = load_adapter(tmp_path / "run" / "adapter")
    assert meta["model_args"] == {"attention": "block_causal", "shifted_logits": True, "block_size": 8}
    assert meta["special_tokens"] == Tokenizer.byte_level().special.as_dict()
    assert meta["label"].startswith("CPU smoke adapter (40 steps, val loss") and meta["trained_on"] == "cpu"
    assert meta["edit_layout"] == "history-file" and meta["edit_history"] == 3  # the server reads both
    assert meta["validation"]["last"]["loss"] == pytest.approx(last)
    assert any(k.endswith("down_proj.weight.lora_B") for k in tensors)
    _check_round_trip(tensors, meta)


def _check_round_trip(tensors: dict, meta: dict) -> None:
    """The trained adapter, as LoRA modules on the base, gives the logits of the merged base."""
    from engine.config import preset
    from engine.model import Transformer
    from engine.train.lora import apply_lora, merge_adapter

    tok = Tokenizer.byte_level()
    args = preset("tiny", special_tokens=tok.special.as_dict(), block_size=8)
    base = Transformer(args).init_random(0)  # the trainer's tiny base (seed 0)
    from engine.train.trainer import base_vocab, init_special_rows

    init_special_rows(base, tok, base_vocab(tok))
    state = {k: v.clone() for k, v in base.state_dict().items()}
    lora = Transformer(args)
    lora.load_state_dict(state)
    apply_lora(lora, meta["lora"]["rank"], meta["lora"]["alpha"], meta["lora"]["targets"])
    params = dict(lora.named_parameters())
    first = base_vocab(tok)
    with torch.no_grad():
        for key, t in tensors.items():
            if key.endswith((".lora_A", ".lora_B")):
                params[key.replace(".weight.lora_", ".lora_")].copy_(t)
            elif key == "added_tokens.embed":
                params["model.embed_tokens.weight"][first:] = t
            else:
                params[key].copy_(t)
        merged = Transformer(args)
        merged.load_state_dict(merge_adapter(state, tensors, meta))
        ids = torch.randint(0, 268, (2, 24))
        assert torch.allclose(lora(ids, is_causal=True), merged(ids, is_causal=True), atol=1e-4)
        assert not torch.allclose(base(ids, is_causal=True), merged(ids, is_causal=True), atol=1e-3)


def test_resume_continues_from_checkpoint(corpus: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    train(_cfg(corpus, out, steps=6, save_every=3, val_every=100, val_examples=2), progress=False)
    assert json.loads((out / "ckpt" / "latest.json").read_text())["step"] == 6
    s = train(_cfg(corpus, out, steps=8, save_every=3, val_every=100, val_examples=2, strict_resume=False),
              resume=True, progress=False)
    assert [h["step"] for h in s["history"]] == list(range(1, 9)) and s["resumed_from"] == 6


def test_schedule_warmup_then_cosine() -> None:
    cfg = TrainConfig(steps=100, warmup=10, min_lr_ratio=0.1)
    assert lr_at(0, cfg) == pytest.approx(0.1) and lr_at(9, cfg) == pytest.approx(1.0)
    assert lr_at(10, cfg) == pytest.approx(1.0) and lr_at(100, cfg) == pytest.approx(0.1)
    assert lr_at(55, cfg) == pytest.approx(0.55)


def test_config_rejects_unknown_fields() -> None:
    with pytest.raises(ValueError, match="unknown training config fields: bogus"):
        TrainConfig.from_dict({"bogus": 1})


def test_cli_train_run_and_examples(corpus: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from edit_server.cli import main

    cfg = tmp_path / "c.json"
    cfg.write_text(json.dumps({"model": "tiny", "corpus": str(corpus), "seq_len": 160, "block_size": 8,
                               "max_canvas": 32, "chars_per_token": 1.0}))
    rc = main(["train", "run", "--config", str(cfg), "--no-progress", "--set", "steps=2", "val_examples=2",
               f"out={tmp_path / 'r'}", "batch_size=2"])
    assert rc == 0
    assert json.loads(capsys.readouterr().out)["steps"] == 2
    assert (tmp_path / "r" / "adapter.safetensors").is_file()
    assert main(["train", "examples", "--corpus", str(corpus), "--tokenizer", "byte", "-n", "2",
                 "--kind", "edit"]) == 0
    assert "=== " in capsys.readouterr().out
    torch.set_num_threads(max(1, torch.get_num_threads()))
