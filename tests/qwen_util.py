"""A tiny Qwen2-shaped GGUF written with gguf's writer: the real file's layout (QKV biases, untied
``output.weight``, RoPE base / RMS eps / context in the metadata, Q4_K / Q5_0 / Q6_K / Q8_0 tensors as
in Qwen2.5-Coder-0.5B's file) and a Qwen-like byte-level BPE tokenizer (``qwen2`` pre-tokenizer, the
FIM / repo tokens, unused ``[PAD…]`` slots at the end) — and the transformers Qwen2 model it came from."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from gguf import GGMLQuantizationType as Q
from gguf import GGUFWriter, quants

from engine.loading.gguf_tokenizer import CONTROL, NORMAL, UNUSED, USER_DEFINED

# K-quants need rows of 256 values; everything here is a multiple of 256
DIM, LAYERS, HEADS, KV, FF, CTX, THETA, EPS = 256, 2, 4, 2, 512, 32768, 1e6, 1e-6
BYTES = sorted(__import__("tokenizers").pre_tokenizers.ByteLevel.alphabet())
MERGES = ["d e", "de f", "Ġ r", "Ġr e", "Ġ Ġ", "ĠĠ ĠĠ", "r e", "re t", "ret u", "retu r", "retur n"]
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|fim_prefix|>", "<|fim_middle|>",
            "<|fim_suffix|>", "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>"]
N_UNUSED = 12
TOKENS = (BYTES + ["de", "def", "Ġr", "Ġre", "ĠĠ", "ĠĠĠĠ", "re", "ret", "retu", "retur", "return"]
          + SPECIALS + ["<tool_call>"])
TOKENS += [f"[PAD{len(TOKENS) + i}]" for i in range(N_UNUSED)]
TYPES = ([NORMAL] * (len(BYTES) + 11) + [CONTROL] * len(SPECIALS) + [USER_DEFINED] + [UNUSED] * N_UNUSED)
VOCAB = len(TOKENS)
EOS = TOKENS.index("<|im_end|>")
BOS = TOKENS.index("<|endoftext|>")

NAMES = {"self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
         "self_attn.o_proj": "attn_output", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
         "mlp.down_proj": "ffn_down", "input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm"}
# the real file's choice per tensor kind (blk.*.ffn_down alternates Q4_K / Q6_K there)
QTYPES = {"token_embd.weight": Q.Q5_0, "output.weight": Q.Q8_0, "attn_q": Q.Q5_0, "attn_k": Q.Q5_0,
          "attn_v": Q.Q8_0, "attn_output": Q.Q5_0, "ffn_gate": Q.Q5_0, "ffn_up": Q.Q4_K}


def gguf_name(hf: str) -> str:
    fixed = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
             "lm_head.weight": "output.weight"}
    if hf in fixed:
        return fixed[hf]
    _, _, i, rest = hf.split(".", 3)
    mod, kind = rest.rsplit(".", 1)
    return f"blk.{i}.{NAMES[mod]}.{kind}"


def qtype(name: str) -> Q:
    if name.endswith(".bias") or "norm" in name:
        return Q.F32
    if name in QTYPES:
        return QTYPES[name]
    kind = name.split(".")[2]
    if kind == "ffn_down":
        return Q.Q6_K if name.startswith("blk.0.") else Q.Q4_K
    return QTYPES[kind]


# gguf-py has no K-quant quantizer: random blocks with small fp16 scales (bytes per 256 values, scale offsets, scale)
_K_BLOCKS = {Q.Q4_K: (144, (0, 2), 2e-4), Q.Q6_K: (210, (208,), 2e-5)}


def _k_quant_raw(shape: tuple[int, ...], qt: Q, seed: int) -> np.ndarray:
    size, offsets, scale = _K_BLOCKS[qt]
    rows, cols = shape
    raw = np.random.default_rng(seed).integers(0, 256, size=(rows, cols // 256, size), dtype=np.uint8)
    for off in offsets:
        raw[..., off:off + 2] = np.full(raw.shape[:2], scale, dtype=np.float16).view(np.uint8).reshape(
            rows, cols // 256, 2)
    return raw.reshape(rows, -1)


def tiny_qwen2(seed: int = 0, layers: int = LAYERS) -> torch.nn.Module:
    import transformers

    torch.manual_seed(seed)
    cfg = transformers.Qwen2Config(vocab_size=VOCAB, hidden_size=DIM, num_hidden_layers=layers,
                                   num_attention_heads=HEADS, num_key_value_heads=KV, intermediate_size=FF,
                                   rope_theta=THETA, rms_norm_eps=EPS, tie_word_embeddings=False,
                                   max_position_embeddings=CTX)
    model = transformers.AutoModelForCausalLM.from_config(cfg, dtype=torch.float32).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name:
                p.uniform_(0.5, 1.5)
            elif name.endswith(".bias"):
                p.normal_(0.0, 0.5)
            else:
                p.normal_(0.0, 0.08)
    return model


def write_qwen_gguf(path: Path, state: dict[str, torch.Tensor], *, quantize: bool = True,
                    arch: str = "qwen2", layers: int = LAYERS, name: str = "tiny-qwen2") -> dict[str, np.ndarray]:
    """Write ``state`` (HF Qwen2 names) like llama.cpp's converter (no Q/K permutation for qwen2).
    Returns the dequantized arrays by HF name: the weights the file really holds."""
    w = GGUFWriter(str(path), arch)
    w.add_uint32(f"{arch}.block_count", layers)
    w.add_uint32(f"{arch}.context_length", CTX)
    w.add_uint32(f"{arch}.embedding_length", DIM)
    w.add_uint32(f"{arch}.feed_forward_length", FF)
    w.add_uint32(f"{arch}.attention.head_count", HEADS)
    w.add_uint32(f"{arch}.attention.head_count_kv", KV)
    w.add_float32(f"{arch}.rope.freq_base", THETA)
    w.add_float32(f"{arch}.attention.layer_norm_rms_epsilon", EPS)
    w.add_string("general.name", name)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("qwen2")
    w.add_token_list(TOKENS)
    w.add_token_merges(MERGES)
    w.add_token_types(TYPES)
    w.add_eos_token_id(EOS)
    w.add_bos_token_id(BOS)
    held: dict[str, np.ndarray] = {}
    for n, (k, t) in enumerate(state.items()):
        arr = t.detach().numpy().astype(np.float32)
        qt = qtype(gguf_name(k)) if quantize else Q.F32
        if qt == Q.F32:
            w.add_tensor(gguf_name(k), arr)
            held[k] = arr
        else:
            raw = _k_quant_raw(arr.shape, qt, n) if qt in _K_BLOCKS else quants.quantize(arr, qt)
            w.add_tensor(gguf_name(k), raw, raw_dtype=qt)
            held[k] = quants.dequantize(raw, qt).reshape(arr.shape)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return held
