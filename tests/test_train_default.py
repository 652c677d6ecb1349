"""engine.default.load_default: adapter checks, merge, args from the JSON (tiny stand-in for the base)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

import engine.loading as loading
from engine.checkpoint import LoadedCheckpoint
from engine.config import preset
from engine.default import ADAPTER, load_default
from engine.model import Transformer
from engine.tokenizer import Tokenizer
from engine.train.lora import AdapterError, apply_lora, mark_trainable, save_adapter


def _tiny_base() -> LoadedCheckpoint:
    tok = Tokenizer.byte_level()
    args = preset("tiny", special_tokens=tok.special.as_dict(), block_size=32)
    return LoadedCheckpoint(args, Transformer(args).init_random(0).state_dict(), tok, "tiny-base", {})


@pytest.fixture
def adapter(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, torch.nn.Module]:
    monkeypatch.setattr(loading, "load_checkpoint", lambda spec, dtype=None: _tiny_base())
    base = _tiny_base()
    model = Transformer(base.args)
    model.load_state_dict(base.state_dict)
    apply_lora(model, 4, 8)
    first = base.tokenizer.special.mask
    with torch.no_grad():
        for g in mark_trainable(model, first):
            for p in g["params"]:
                if p.shape[0] == base.args.vocab_size:
                    p[first:] += 0.1
                else:
                    p.add_(torch.randn_like(p) * 0.05)
    meta = {"lora": {"rank": 4, "alpha": 8, "targets": []}, "special_tokens": base.tokenizer.special.as_dict(),
            "model_args": {"attention": "block_causal", "shifted_logits": True, "block_size": 8},
            "label": "CPU smoke adapter (test)", "trained_on": "cpu", "validation": {"last": {"loss": 1.0}},
            "edit_history": 2}
    save_adapter(tmp_path / "ad", model, first, meta)
    return tmp_path / "ad", model


def test_load_default_merges_and_sets_args(adapter: tuple[Path, torch.nn.Module]) -> None:
    path, lora_model = adapter
    ck = load_default(path, base=Path("unused.gguf"))
    assert ck.args.block_size == 8 and ck.args.attention == "block_causal" and ck.args.shifted_logits
    assert ck.meta["label"] == "CPU smoke adapter (test)" and ck.meta["trained_on"] == "cpu"
    assert ck.meta["edit_history"] == 2  # the engine's info, then the server's next-edit prompts, follow it
    assert ck.name == "SmolLM2-135M block-diffusion"  # the label lives in meta, not twice in the name
    merged = Transformer(ck.args)
    merged.load_state_dict(ck.state_dict)
    ids = torch.randint(0, 268, (1, 12))
    with torch.no_grad():
        assert torch.allclose(merged(ids, is_causal=True), lora_model(ids, is_causal=True), atol=1e-4)


def _patch_meta(path: Path, section: str, key: str, value: object) -> None:
    js = path.with_suffix(".json")
    meta = json.loads(js.read_text())
    meta[section][key] = value
    js.write_text(json.dumps(meta))


def test_load_default_rejects_mismatched_special_ids(adapter: tuple[Path, torch.nn.Module]) -> None:
    path, _ = adapter
    _patch_meta(path, "special_tokens", "mask", 5)
    with pytest.raises(AdapterError, match=r"ad\.json: special_tokens disagree"):
        load_default(path, base=Path("unused.gguf"))


def test_load_default_bad_model_arg(adapter: tuple[Path, torch.nn.Module]) -> None:
    path, _ = adapter
    _patch_meta(path, "model_args", "warp_factor", 9)
    with pytest.raises(AdapterError, match="model_args.warp_factor"):
        load_default(path, base=Path("unused.gguf"))


def test_shipped_adapter_is_small_and_labelled() -> None:
    st, js = ADAPTER.with_suffix(".safetensors"), ADAPTER.with_suffix(".json")
    assert st.is_file() and js.is_file(), "the default adapter ships with the package"
    assert st.stat().st_size <= 50 * 1024 * 1024
    meta = json.loads(js.read_text())
    assert meta["label"] and meta["trained_on"] and meta["base"]["sha256"]
    assert meta["model_args"]["attention"] == "block_causal"
    assert set(meta["special_tokens"]) >= {"mask", "eom", "pad", "eos"}
