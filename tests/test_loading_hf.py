"""HF checkpoint directories: tiny random Llama/Qwen2 (transformers) + Dream/LLaDA mappings + broken ones."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file
from tokenizers import Tokenizer as HFTokenizer
from tokenizers import decoders, models, pre_tokenizers

from engine.loading import CheckpointError, load_checkpoint
from engine.loading.common import EMBED, LM_HEAD
from engine.loading.hf import ARCHITECTURES, llada_name
from engine.tokens import SPECIAL_TOKENS

transformers = pytest.importorskip("transformers")

N_BASE = 257  # 256 byte tokens + <|endoftext|>
DIMS = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
            intermediate_size=48, max_position_embeddings=256)


def write_tokenizer(root: Path, extra: tuple[str, ...] = ()) -> None:
    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    vocab = {ch: i for i, ch in enumerate(alphabet)}
    for t in ("<|endoftext|>", *extra):
        vocab[t] = len(vocab)
    hf = HFTokenizer(models.BPE(vocab=vocab, merges=[]))
    hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    hf.decoder = decoders.ByteLevel()
    hf.add_special_tokens(["<|endoftext|>", *extra])
    hf.save(str(root / "tokenizer.json"))
    (root / "tokenizer_config.json").write_text(json.dumps({"eos_token": "<|endoftext|>"}))


def make_hf(root: Path, kind: str = "llama", *, vocab: int = N_BASE, shard: str | None = None,
            seed: int = 0, **over: object) -> torch.nn.Module:
    """A tiny random transformers model saved (safetensors) with a tokenizer into ``root``."""
    torch.manual_seed(seed)
    if kind == "llama":
        cfg = transformers.LlamaConfig(vocab_size=vocab, **{**DIMS, **over})
    else:
        cfg = transformers.Qwen2Config(vocab_size=vocab, **{**DIMS, **over})
    model = transformers.AutoModelForCausalLM.from_config(cfg, dtype=torch.float32).eval()
    with torch.no_grad():  # non-trivial norms so a mix-up of norm tensors is caught
        for name, p in model.named_parameters():
            if "norm" in name:
                p.uniform_(0.5, 1.5)
    root.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(root), **({"max_shard_size": shard} if shard else {}))
    write_tokenizer(root)
    return model


def engine_logits(ck, ids: list[int]) -> torch.Tensor:  # type: ignore[no-untyped-def]
    from engine.model import Transformer

    m = Transformer(ck.args)
    m.load_state_dict(ck.state_dict, strict=True)
    with torch.no_grad():
        return m.eval()(torch.tensor([ids]), is_causal=True)[0]


def hf_logits(model: torch.nn.Module, ids: list[int]) -> torch.Tensor:
    with torch.no_grad():
        return model(torch.tensor([ids])).logits[0]


IDS = [5, 17, 200, 3, 99, 256, 42, 7, 128, 64, 1, 250]


def check_same_weights(ck, model: torch.nn.Module) -> None:  # type: ignore[no-untyped-def]
    ref = model.state_dict()
    for k, v in ck.state_dict.items():
        assert k in ref, k
        assert torch.equal(v[: ref[k].shape[0]], ref[k]), k


def test_llama_loads_exactly_and_logits_match(tmp_path: Path) -> None:
    model = make_hf(tmp_path, "llama", rope_theta=5000.0)
    ck = load_checkpoint(tmp_path)
    a = ck.args
    assert (a.dim, a.n_layers, a.n_heads, a.n_kv_heads, a.intermediate_size) == (32, 2, 4, 2, 48)
    assert a.rope_theta == 5000.0 and a.rope_scaling is None and not a.qkv_bias and not a.tie_embeddings
    assert a.attention == "block_causal" and a.shifted_logits
    check_same_weights(ck, model)
    # 11 special tokens appended: embedding + untied lm_head grew to the tokenizer's size
    assert a.vocab_size == ck.tokenizer.vocab_size == N_BASE + len(SPECIAL_TOKENS)
    assert ck.state_dict[EMBED].shape[0] == ck.state_dict[LM_HEAD].shape[0] == a.vocab_size
    assert a.special_tokens == ck.tokenizer.special.as_dict()
    assert a.special_tokens["eos"] == 256 and a.special_tokens["mask"] >= N_BASE
    assert ck.tokenizer.decode([a.special_tokens["cursor"]]) == SPECIAL_TOKENS["cursor"]
    diff = (engine_logits(ck, IDS)[:, :N_BASE] - hf_logits(model, IDS)).abs().max().item()
    assert diff < 1e-4


def test_new_rows_are_mean_plus_small_seeded_noise(tmp_path: Path) -> None:
    make_hf(tmp_path)
    a, b = load_checkpoint(tmp_path), load_checkpoint(tmp_path)
    emb = a.state_dict[EMBED]
    old, new = emb[:N_BASE], emb[N_BASE:]
    assert torch.equal(new, b.state_dict[EMBED][N_BASE:])  # seeded
    assert new.shape[0] == len(SPECIAL_TOKENS)
    spread = (new - old.mean(0)).abs().max().item()
    assert 0 < spread < 0.2 * old.std().item()  # close to the mean, but rows differ
    assert not torch.equal(new[0], new[1])


def test_qwen2_tied_bias_rope_scaling(tmp_path: Path) -> None:
    model = make_hf(tmp_path, "qwen2", vocab=300, tie_word_embeddings=True,
                    rope_scaling={"rope_type": "linear", "factor": 2.0}, rope_theta=1e6)
    ck = load_checkpoint(tmp_path)
    a = ck.args
    assert a.qkv_bias and a.tie_embeddings and LM_HEAD not in ck.state_dict
    assert a.rope_theta == 1e6 and a.rope_scaling == {"rope_type": "linear", "factor": 2.0}
    assert a.vocab_size == 300  # checkpoint vocab larger than tokenizer + specials: no growth
    assert ck.tokenizer.special.mask == N_BASE
    check_same_weights(ck, model)
    assert "model.layers.0.self_attn.q_proj.bias" in ck.state_dict
    diff = (engine_logits(ck, IDS) - hf_logits(model, IDS)).abs().max().item()
    assert diff < 1e-4


def test_sharded_index(tmp_path: Path) -> None:
    model = make_hf(tmp_path, "llama", shard="20KB")
    index = json.loads((tmp_path / "model.safetensors.index.json").read_text())
    shards = sorted(set(index["weight_map"].values()))
    assert len(shards) >= 3
    check_same_weights(load_checkpoint(tmp_path), model)
    # a tensor listed in the index but absent from its shard
    tensor = next(k for k, v in index["weight_map"].items() if v == shards[1])
    sd = load_file(str(tmp_path / shards[1]))
    del sd[tensor]
    save_file(sd, str(tmp_path / shards[1]), metadata={"format": "pt"})
    with pytest.raises(CheckpointError, match=rf"{shards[1]}: tensor '{tensor}' missing \(listed in index\)"):
        load_checkpoint(tmp_path)
    (tmp_path / shards[1]).unlink()
    with pytest.raises(CheckpointError, match=rf"{shards[1]}: shard missing"):
        load_checkpoint(tmp_path)


def _to_llada(src: Path, dst: Path, mask_id: int) -> dict[str, torch.Tensor]:
    """Rewrite a tiny Llama checkpoint with LLaDA's tensor names and config fields."""
    sd = load_file(str(src / "model.safetensors"))
    renamed = {}
    inverse = {}
    for k, v in sd.items():
        new = (k.replace("model.layers.", "model.transformer.blocks.").replace("self_attn.", "")
               .replace("o_proj", "attn_out").replace("mlp.gate_proj", "ff_proj").replace("mlp.up_proj", "up_proj")
               .replace("mlp.down_proj", "ff_out").replace("input_layernorm", "attn_norm")
               .replace("post_attention_layernorm", "ff_norm")
               .replace("model.embed_tokens", "model.transformer.wte").replace("model.norm", "model.transformer.ln_f")
               .replace("lm_head", "model.transformer.ff_out"))
        renamed[new] = v
        inverse[new] = k
    assert all(llada_name(n) == k for n, k in inverse.items())
    dst.mkdir()
    save_file(renamed, str(dst / "model.safetensors"), metadata={"format": "pt"})
    cfg = {"architectures": ["LLaDAModelLM"], "model_type": "llada", "d_model": 32, "n_layers": 2,
           "n_heads": 4, "n_kv_heads": 2, "mlp_hidden_size": 48, "rope_theta": 500000.0,
           "rms_norm_eps": 1e-5, "max_sequence_length": 4096, "vocab_size": N_BASE + 1,
           "embedding_size": N_BASE + 1, "weight_tying": False, "eos_token_id": 256,
           "mask_token_id": mask_id, "include_qkv_bias": False}
    (dst / "config.json").write_text(json.dumps(cfg))
    write_tokenizer(dst, extra=("<|mdm_mask|>",))
    return sd


def test_llada_renaming_and_regime(tmp_path: Path) -> None:
    make_hf(tmp_path / "llama", "llama", vocab=N_BASE + 1)
    sd = _to_llada(tmp_path / "llama", tmp_path / "llada", mask_id=N_BASE)
    ck = load_checkpoint(tmp_path / "llada")
    a = ck.args
    assert a.attention == "bidirectional" and a.shifted_logits is False
    assert a.rope_theta == 500000.0 and a.max_seq_len == 4096 and not a.tie_embeddings
    assert ck.tokenizer.special.mask == N_BASE  # from config mask_token_id, not our <|mask|>
    assert ck.tokenizer.token_text(ck.tokenizer.special.mask) == "<|mdm_mask|>"
    assert ck.tokenizer.special.eos == 256
    for k, v in sd.items():
        assert torch.equal(ck.state_dict[k][: v.shape[0]], v), k
    assert ck.meta["architecture"] == "LLaDAModelLM"


def test_dream_config_mapping(tmp_path: Path) -> None:
    make_hf(tmp_path, "qwen2", vocab=N_BASE + 1, rope_theta=1e6)
    cfg = json.loads((tmp_path / "config.json").read_text())
    cfg.update(architectures=["DreamModel"], model_type="Dream", mask_token_id=N_BASE)
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    write_tokenizer(tmp_path, extra=("<|mask|>",))
    ck = load_checkpoint(tmp_path)
    a = ck.args
    assert a.attention == "bidirectional" and a.shifted_logits and a.qkv_bias and a.rope_theta == 1e6
    assert ck.tokenizer.special.mask == N_BASE == a.special_tokens["mask"]


# ---- broken checkpoints -----------------------------------------------------------------------
def _edit_config(root: Path, **changes: object) -> None:
    cfg = json.loads((root / "config.json").read_text())
    for k, v in changes.items():
        if v is None:
            cfg.pop(k, None)
        else:
            cfg[k] = v
    (root / "config.json").write_text(json.dumps(cfg))


def test_missing_config_field(tmp_path: Path) -> None:
    make_hf(tmp_path)
    _edit_config(tmp_path, num_attention_heads=None)
    with pytest.raises(CheckpointError, match="config.json: missing field 'num_attention_heads'"):
        load_checkpoint(tmp_path)


def test_unknown_architecture_lists_supported(tmp_path: Path) -> None:
    make_hf(tmp_path)
    _edit_config(tmp_path, architectures=["GPTNeoXForCausalLM"])
    with pytest.raises(CheckpointError, match="GPTNeoXForCausalLM") as e:
        load_checkpoint(tmp_path)
    assert all(arch in str(e.value) for arch in ARCHITECTURES)


def test_wrong_shape_names_tensor_and_shapes(tmp_path: Path) -> None:
    make_hf(tmp_path)
    sd = load_file(str(tmp_path / "model.safetensors"))
    sd["model.layers.1.mlp.up_proj.weight"] = torch.zeros(40, 32)
    save_file(sd, str(tmp_path / "model.safetensors"), metadata={"format": "pt"})
    with pytest.raises(CheckpointError, match=r"'model.layers.1.mlp.up_proj.weight' has shape \[40, 32\], "
                                              r"expected \[48, 32\]"):
        load_checkpoint(tmp_path)


def test_missing_tensor_is_named(tmp_path: Path) -> None:
    make_hf(tmp_path)
    sd = load_file(str(tmp_path / "model.safetensors"))
    del sd["model.layers.0.input_layernorm.weight"]
    save_file(sd, str(tmp_path / "model.safetensors"), metadata={"format": "pt"})
    with pytest.raises(CheckpointError, match="missing tensor.*'model.layers.0.input_layernorm.weight'"):
        load_checkpoint(tmp_path)


def test_pickle_only_directory_is_refused_without_unpickling(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    make_hf(tmp_path)
    (tmp_path / "model.safetensors").unlink()
    (tmp_path / "pytorch_model.bin").write_bytes(b"\x80\x04not really a pickle")

    def boom(*a: object, **k: object) -> None:
        raise AssertionError("torch.load must never be called")

    monkeypatch.setattr(torch, "load", boom)
    with pytest.raises(CheckpointError, match="pytorch_model.bin.*refusing to unpickle"):
        load_checkpoint(tmp_path)


def test_missing_tokenizer_and_bad_special_ids(tmp_path: Path) -> None:
    make_hf(tmp_path)
    _edit_config(tmp_path, special_tokens={"mask": 3})
    with pytest.raises(CheckpointError, match="special_tokens .*disagree.*mask"):
        load_checkpoint(tmp_path)
    good = {"mask": N_BASE, "eos": 256}
    _edit_config(tmp_path, special_tokens=good)
    assert load_checkpoint(tmp_path).tokenizer.special.mask == N_BASE
    (tmp_path / "tokenizer.json").unlink()
    with pytest.raises(CheckpointError, match="tokenizer.json not found"):
        load_checkpoint(tmp_path)


def test_bad_specs(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match="no such file or directory"):
        load_checkpoint(tmp_path / "nope")
    with pytest.raises(CheckpointError, match="config.json not found"):
        load_checkpoint(tmp_path)
    f = tmp_path / "w.safetensors"
    save_file({"x": torch.zeros(1)}, str(f))
    with pytest.raises(CheckpointError, match="not a loadable checkpoint"):
        load_checkpoint(f)


def test_hf_loading_needs_no_gguf_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The GPU machine has no `gguf`: HF directories (e.g. exports of the base) must load without it."""
    import sys

    make_hf(tmp_path)
    monkeypatch.setitem(sys.modules, "gguf", None)  # any `import gguf` now raises ImportError
    assert load_checkpoint(tmp_path).args.n_layers == 2
