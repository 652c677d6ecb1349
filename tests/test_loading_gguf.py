"""GGUF files written by the test (gguf.GGUFWriter): dequantization, Q/K un-permutation, tokenizer."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType as Q
from gguf import GGUFWriter, quants

from engine.loading import CheckpointError, load_checkpoint
from engine.loading.common import EMBED
from engine.loading.gguf_file import permute_qk, unpermute_qk
from engine.loading.gguf_tokenizer import CONTROL, NORMAL, USER_DEFINED
from engine.tokens import SPECIAL_TOKENS
from tests.qwen_util import gguf_name  # HF tensor names -> GGUF ones (llama and qwen2 share them)

transformers = pytest.importorskip("transformers")

DIM, LAYERS, HEADS, KV, FF = 32, 2, 4, 2, 64
BYTES = sorted(__import__("tokenizers").pre_tokenizers.ByteLevel.alphabet())
MERGES = ["d e", "de f", "Ġ r", "Ġr e"]
TOKENS = BYTES + ["de", "def", "Ġr", "Ġre", "<|endoftext|>", "<file_sep>"]
TYPES = [NORMAL] * (len(TOKENS) - 2) + [CONTROL, USER_DEFINED]
VOCAB = len(TOKENS)
EOS = TOKENS.index("<|endoftext|>")


def llama_cpp_permute(w: np.ndarray, n_head: int) -> np.ndarray:
    """Verbatim logic of llama.cpp convert_hf_to_gguf.py ``LlamaModel.permute``."""
    return (w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:])
            .swapaxes(1, 2)
            .reshape(w.shape))


def tiny_llama(tie: bool = False) -> torch.nn.Module:
    torch.manual_seed(0)
    cfg = transformers.LlamaConfig(vocab_size=VOCAB, hidden_size=DIM, num_hidden_layers=LAYERS,
                                   num_attention_heads=HEADS, num_key_value_heads=KV,
                                   intermediate_size=FF, rope_theta=10000.0, rms_norm_eps=1e-5,
                                   tie_word_embeddings=tie, max_position_embeddings=512)
    model = transformers.AutoModelForCausalLM.from_config(cfg, dtype=torch.float32).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.uniform_(0.5, 1.5)
    return model


def write_gguf(path: Path, state: dict[str, torch.Tensor], qtype: dict[str, Q] | None = None, *,
               arch: str = "llama", skip: tuple[str, ...] = (), tie: bool = False) -> None:
    """HF-layout ``state`` -> GGUF like llama.cpp's converter (Q/K permuted, names mapped)."""
    w = GGUFWriter(str(path), arch)
    meta = {"block_count": LAYERS, "embedding_length": DIM, "feed_forward_length": FF,
            "attention.head_count": HEADS, "attention.head_count_kv": KV, "context_length": 512}
    for k, v in meta.items():
        if k not in skip:
            w.add_uint32(f"{arch}.{k}", v)
    w.add_float32(f"{arch}.rope.freq_base", 10000.0)
    w.add_float32(f"{arch}.attention.layer_norm_rms_epsilon", 1e-5)
    w.add_string("general.name", "tiny-gguf")
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("smollm")
    w.add_token_list(TOKENS)
    w.add_token_merges(MERGES)
    w.add_token_types(TYPES)
    w.add_eos_token_id(EOS)
    for k, t in state.items():
        if tie and k == "lm_head.weight":
            continue
        arr = t.detach().numpy().astype(np.float32)
        if arch == "llama" and "q_proj" in k:
            arr = llama_cpp_permute(arr, HEADS)
        elif arch == "llama" and "k_proj" in k:
            arr = llama_cpp_permute(arr, KV)
        qt = (qtype or {}).get(k, Q.F32)
        if qt == Q.F32:
            w.add_tensor(gguf_name(k), arr)
        elif qt == Q.F16:
            w.add_tensor(gguf_name(k), arr.astype(np.float16))
        else:
            w.add_tensor(gguf_name(k), quants.quantize(arr, qt), raw_dtype=qt)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


IDS = [5, 17, 200, 3, 99, 256, 42, 7, 128, 64, 1, 250]


def test_f32_gguf_matches_transformers_exactly(tmp_path: Path) -> None:
    model = tiny_llama()
    sd = model.state_dict()
    write_gguf(tmp_path / "m.gguf", sd)
    ck = load_checkpoint(tmp_path / "m.gguf")
    a = ck.args
    assert (a.dim, a.n_layers, a.n_heads, a.n_kv_heads, a.intermediate_size) == (DIM, LAYERS, HEADS, KV, FF)
    assert a.max_seq_len == 512 and a.rope_theta == 10000.0 and not a.tie_embeddings
    assert abs(a.norm_eps - 1e-5) < 1e-9 and ck.name == "tiny-gguf" and ck.meta["format"] == "gguf"
    for k, v in sd.items():  # Q/K un-permuted back to HF layout, bit for bit
        assert torch.equal(ck.state_dict[k][: v.shape[0]], v), k
    assert a.vocab_size == VOCAB + len(SPECIAL_TOKENS) == ck.state_dict[EMBED].shape[0]
    from engine.model import Transformer

    m = Transformer(a)
    m.load_state_dict(ck.state_dict, strict=True)
    with torch.no_grad():
        ours = m.eval()(torch.tensor([IDS]), is_causal=True)[0, :, :VOCAB]
        ref = model(torch.tensor([IDS])).logits[0]
    assert (ours - ref).abs().max().item() < 1e-4


def _block_bound(x: np.ndarray, qt: Q) -> np.ndarray:
    """Per-element worst-case quantization error (half a step, plus fp16 scale rounding)."""
    blocks = x.reshape(-1, 32)
    if qt == Q.Q8_0:
        step = np.abs(blocks).max(1, keepdims=True) / 127
    else:  # Q4_1
        step = (blocks.max(1, keepdims=True) - blocks.min(1, keepdims=True)) / 15
    amax = np.abs(blocks).max(1, keepdims=True)
    bound = step * 0.5 + amax * 2e-3 + 1e-6  # fp16 rounding of the block's scale/min
    return np.broadcast_to(bound, blocks.shape).reshape(x.shape)


def test_quantized_types_dequantize_within_tolerance(tmp_path: Path) -> None:
    model = tiny_llama(tie=True)
    sd = model.state_dict()
    qtype = {"model.embed_tokens.weight": Q.Q8_0}
    for i in range(LAYERS):
        p = f"model.layers.{i}."
        qtype |= {p + "self_attn.q_proj.weight": Q.Q4_1, p + "self_attn.k_proj.weight": Q.Q4_1,
                  p + "self_attn.v_proj.weight": Q.F16, p + "self_attn.o_proj.weight": Q.BF16,
                  p + "mlp.gate_proj.weight": Q.Q4_1, p + "mlp.up_proj.weight": Q.Q8_0,
                  p + "mlp.down_proj.weight": Q.Q4_1}
    write_gguf(tmp_path / "q.gguf", sd, qtype, tie=True)
    ck = load_checkpoint(tmp_path / "q.gguf")
    assert ck.args.tie_embeddings and "lm_head.weight" not in ck.state_dict
    for k, qt in qtype.items():
        ref = sd[k].numpy()
        got = ck.state_dict[k][: ref.shape[0]].numpy()
        assert got.dtype == np.float32
        err = np.abs(got - ref)
        if qt in (Q.Q8_0, Q.Q4_1):
            # the bound is computed on the rows as llama.cpp stored them (permuted for q/k)
            n = HEADS if "q_proj" in k else KV if "k_proj" in k else 0
            perm = llama_cpp_permute(ref, n) if n else ref
            bound = _block_bound(perm, qt)
            bound = unpermute_qk(bound, n) if n else bound
            assert (err <= bound).all(), (k, float((err - bound).max()))
            assert err.max() > 0  # really quantized
        elif qt == Q.F16:
            np.testing.assert_allclose(got, ref, rtol=1e-3, atol=1e-6)
        else:  # BF16
            np.testing.assert_allclose(got, ref, rtol=8e-3, atol=1e-6)
    assert torch.equal(ck.state_dict["model.norm.weight"], sd["model.norm.weight"])  # F32 exact


def test_unpermute_inverts_llama_cpp_permutation() -> None:
    rng = np.random.default_rng(0)
    for n_head, rows in ((4, 32), (2, 16), (9, 576)):
        w = rng.standard_normal((rows, 8)).astype(np.float32)
        p = llama_cpp_permute(w, n_head)
        assert not np.array_equal(p, w)
        np.testing.assert_array_equal(unpermute_qk(p, n_head), w)
        np.testing.assert_array_equal(permute_qk(w, n_head), p)
        b = rng.standard_normal(rows).astype(np.float32)  # biases permute the same way
        np.testing.assert_array_equal(unpermute_qk(llama_cpp_permute(b, n_head), n_head), b)


def test_tokenizer_from_metadata_round_trips(tmp_path: Path) -> None:
    write_gguf(tmp_path / "m.gguf", tiny_llama().state_dict())
    tok = load_checkpoint(tmp_path / "m.gguf").tokenizer
    text = "def re(x):\n    return 12 + x<file_sep>é"
    ids = tok.encode(text)
    assert tok.decode(ids) == text
    assert TOKENS.index("def") in ids and TOKENS.index("Ġre") in ids  # merges applied
    assert TOKENS.index("<file_sep>") in ids  # user-defined token matched whole
    assert tok.encode("12") == [TOKENS.index("1"), TOKENS.index("2")]  # smollm: digits split
    assert tok.encode("<|endoftext|>") == [EOS] and tok.special.eos == EOS
    sp = tok.special.as_dict()
    assert sorted(v for k, v in sp.items() if k != "eos") == list(range(VOCAB, VOCAB + len(SPECIAL_TOKENS)))
    assert tok.encode(SPECIAL_TOKENS["fim_middle"]) == [tok.special.fim_middle]


def test_gguf_errors_name_the_field_or_tensor(tmp_path: Path) -> None:
    sd = tiny_llama().state_dict()
    write_gguf(tmp_path / "a.gguf", sd, skip=("attention.head_count",))
    with pytest.raises(CheckpointError, match="a.gguf: missing metadata field 'llama.attention.head_count'"):
        load_checkpoint(tmp_path / "a.gguf")
    write_gguf(tmp_path / "b.gguf", sd, arch="gpt2")
    with pytest.raises(CheckpointError, match="unsupported GGUF architecture 'gpt2'; supported: llama, qwen2"):
        load_checkpoint(tmp_path / "b.gguf")
    bad = dict(sd)
    bad["model.layers.1.mlp.up_proj.weight"] = torch.zeros(FF, DIM + 32)
    write_gguf(tmp_path / "c.gguf", bad)
    with pytest.raises(CheckpointError, match=r"'blk.1.ffn_up.weight' has shape \[64, 64\], expected \[64, 32\]"):
        load_checkpoint(tmp_path / "c.gguf")
    (tmp_path / "d.gguf").write_bytes(b"not a gguf file at all")
    with pytest.raises(CheckpointError, match="d.gguf: not a readable GGUF file"):
        load_checkpoint(tmp_path / "d.gguf")


def test_export_to_safetensors_shards_round_trips(tmp_path: Path) -> None:
    from engine.loading.export import save_hf

    write_gguf(tmp_path / "m.gguf", tiny_llama().state_dict(), {"model.embed_tokens.weight": Q.Q8_0})
    ck = load_checkpoint(tmp_path / "m.gguf")
    ck.args.block_size = 16
    shards = save_hf(ck, tmp_path / "hf", max_shard_bytes=20_000)
    assert len(shards) >= 3 and all(p.stat().st_size < 20_000 + 40_000 for p in shards)
    back = load_checkpoint(tmp_path / "hf")
    assert back.args == ck.args  # same vocab (no second extension), regime, special tokens
    assert back.state_dict.keys() == ck.state_dict.keys()
    assert all(torch.equal(back.state_dict[k], v) for k, v in ck.state_dict.items())
    text = "def re(x): <|user_cursor|>12"
    assert back.tokenizer.encode(text) == ck.tokenizer.encode(text)
    assert back.tokenizer.special == ck.tokenizer.special


@pytest.mark.parametrize("qt,block_bytes,scale_offsets", [(Q.Q4_K, 144, (0, 2)), (Q.Q6_K, 210, (208,))])
def test_k_quant_tensors_dequantize_in_hf_shape(tmp_path: Path, qt: Q, block_bytes: int,
                                                 scale_offsets: tuple[int, ...]) -> None:
    """K-quants (256-value blocks): no quantizer in gguf-py, so random blocks with sane fp16 scales."""
    from gguf import GGUFReader

    from engine.loading.gguf_file import dequantize

    rows, cols = 3, 512
    rng = np.random.default_rng(0)
    raw = rng.integers(0, 256, size=(rows, cols // 256, block_bytes), dtype=np.uint8)
    for off in scale_offsets:
        raw[..., off:off + 2] = np.full(raw.shape[:2], 0.01, dtype=np.float16).view(np.uint8).reshape(
            rows, cols // 256, 2)
    raw = raw.reshape(rows, -1)
    w = GGUFWriter(str(tmp_path / "k.gguf"), "llama")
    w.add_tensor("t", raw, raw_dtype=qt)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    t = GGUFReader(str(tmp_path / "k.gguf")).tensors[0]
    got = dequantize(t)
    assert got.shape == (rows, cols) and got.dtype == np.float32 and np.isfinite(got).all()
    np.testing.assert_array_equal(got, quants.dequantize(raw, qt))
    assert np.abs(got).max() > 0


def test_converted_copy_is_reused_and_refreshed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    from engine.loading import convert_cache, gguf_file

    src = tmp_path / "m.gguf"
    write_gguf(src, tiny_llama().state_dict(), {"model.embed_tokens.weight": Q.Q8_0})
    first = load_checkpoint(src, convert_cache=True)
    out = convert_cache.converted_dir(src)
    assert (out / convert_cache.STAMP).is_file()
    assert not list(tmp_path.glob(".converting-*"))
    calls: list[Path] = []
    real = gguf_file.load_gguf
    monkeypatch.setattr(gguf_file, "load_gguf", lambda p, *a, **k: calls.append(p) or real(p, *a, **k))
    again = load_checkpoint(src, convert_cache=True)
    assert calls == [] and again.meta["converted"] == str(out)
    assert again.args == first.args and again.name == first.name == "tiny-gguf"
    assert all(torch.equal(again.state_dict[k], v) for k, v in first.state_dict.items())
    assert again.tokenizer.special == first.tokenizer.special
    # the GGUF changed (mtime): convert again; a corrupt copy too
    os.utime(src, ns=(src.stat().st_atime_ns, src.stat().st_mtime_ns + 10**9))
    load_checkpoint(src, convert_cache=True)
    assert len(calls) == 1
    (out / "model-00001-of-00001.safetensors").write_bytes(b"junk")
    assert load_checkpoint(src, convert_cache=True).args == first.args
    assert len(calls) == 2
    # files outside the base cache dir are not cached by default
    other = tmp_path / "o" / "m.gguf"
    other.parent.mkdir()
    other.write_bytes(src.read_bytes())
    load_checkpoint(other)
    assert not convert_cache.converted_dir(other).exists()


def test_qwen2_gguf_has_biases_and_no_permutation(tmp_path: Path) -> None:
    torch.manual_seed(0)
    cfg = transformers.Qwen2Config(vocab_size=VOCAB, hidden_size=DIM, num_hidden_layers=LAYERS,
                                   num_attention_heads=HEADS, num_key_value_heads=KV, intermediate_size=FF,
                                   rope_theta=10000.0, rms_norm_eps=1e-5, tie_word_embeddings=True)
    model = transformers.AutoModelForCausalLM.from_config(cfg, dtype=torch.float32).eval()
    sd = model.state_dict()
    write_gguf(tmp_path / "q.gguf", sd, arch="qwen2", tie=True)
    ck = load_checkpoint(tmp_path / "q.gguf")
    assert ck.args.qkv_bias and ck.args.tie_embeddings
    for k, v in sd.items():
        if k != "lm_head.weight":
            assert torch.equal(ck.state_dict[k][: v.shape[0]], v), k
