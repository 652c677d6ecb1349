"""Build a `tokenizers` BPE tokenizer from GGUF tokenizer metadata (``tokenizer.ggml.model == "gpt2"``)."""

from __future__ import annotations

import logging
from collections.abc import Sequence

from tokenizers import AddedToken, Regex, decoders, models, pre_tokenizers
from tokenizers import Tokenizer as HFTokenizer

log = logging.getLogger(__name__)

# llama.cpp token types
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6

_BYTE_LEVEL = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
_LLAMA3_RE = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
              r"|\s*[\r\n]+|\s+(?!\S)|\s+")
_QWEN2_RE = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
             r"|\s*[\r\n]+|\s+(?!\S)|\s+")


def _split_then_bytes(regex: str) -> pre_tokenizers.PreTokenizer:
    return pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(regex), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])


def pre_tokenizer_for(pre: str | None) -> pre_tokenizers.PreTokenizer:
    """The pre-tokenizer matching llama.cpp's ``tokenizer.ggml.pre`` name."""
    if pre in ("smollm", "starcoder", "refact", "codeshell"):  # digits split one by one, then GPT-2
        return pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), _BYTE_LEVEL])
    if pre in ("llama-bpe", "llama3", "dbrx", "smaug-bpe"):
        return _split_then_bytes(_LLAMA3_RE)
    if pre in ("qwen2", "deepseek-r1-qwen"):
        return _split_then_bytes(_QWEN2_RE)
    if pre not in (None, "default", "gpt-2", "gpt2"):
        log.warning("GGUF tokenizer.ggml.pre=%r not known here; using the GPT-2 pre-tokenizer", pre)
    return _BYTE_LEVEL


def build_bpe(tokens: Sequence[str], merges: Sequence[str], token_types: Sequence[int] | None = None,
              pre: str | None = None) -> HFTokenizer:
    """Byte-level BPE from vocab + merges; control/user-defined tokens become added tokens."""
    vocab = {t: i for i, t in enumerate(tokens)}
    pairs = []
    for m in merges:
        a, sep, b = m.partition(" ")
        if not sep:
            raise ValueError(f"GGUF tokenizer.ggml.merges: bad merge {m!r}")
        pairs.append((a, b))
    hf = HFTokenizer(models.BPE(vocab=vocab, merges=pairs, fuse_unk=False))
    hf.pre_tokenizer = pre_tokenizer_for(pre)
    hf.decoder = decoders.ByteLevel()
    if token_types is not None:
        added = [AddedToken(tokens[i], special=(t == CONTROL), normalized=False)
                 for i, t in enumerate(token_types) if t in (CONTROL, USER_DEFINED)]
        if added:
            hf.add_tokens(added)
    return hf
