"""The tokenizer of an HF checkpoint directory as a `tokenizers.Tokenizer`, and its special tokens.

``tokenizer.json`` when present; otherwise a byte-level BPE rebuilt from ``vocab.json`` +
``merges.txt`` with the Qwen2 pre-tokenizer (Dream / Dream-Coder / DiffuCoder ship only these and a
remote-code tokenizer class, which we never run), plus the added tokens listed in
``tokenizer_config.json`` (``added_tokens_decoder``) and ``added_tokens.json``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tokenizers import AddedToken, Regex, decoders, normalizers, pre_tokenizers
from tokenizers import Tokenizer as HFTokenizer
from tokenizers.models import BPE

from engine.loading.common import CheckpointError

# Qwen2's pre-tokenization split (public: Qwen2 tokenizer / tiktoken cl100k-style pattern)
QWEN2_SPLIT = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"""
               r"""\s*[\r\n]+|\s+(?!\S)|\s+""")


def tokenizer_config(root: Path) -> dict[str, Any]:
    p = root / "tokenizer_config.json"
    if not p.is_file():
        return {}
    try:
        return dict(json.loads(p.read_text()))
    except json.JSONDecodeError as e:
        raise CheckpointError(f"{p}: invalid JSON ({e})") from None


def token_text(v: Any) -> str | None:
    """A special-token entry of tokenizer_config.json (string or AddedToken dict) → its text."""
    if isinstance(v, dict):
        v = v.get("content")
    return str(v) if v else None


def chat_template(root: Path, tc: dict[str, Any]) -> str | None:
    """The checkpoint's chat template: ``chat_template.jinja``, ``chat_template.json`` or the
    ``chat_template`` of tokenizer_config.json (a string, or a list of named templates)."""
    if (root / "chat_template.jinja").is_file():
        return (root / "chat_template.jinja").read_text()
    t: Any = tc.get("chat_template")
    if (root / "chat_template.json").is_file():
        t = json.loads((root / "chat_template.json").read_text()).get("chat_template", t)
    if isinstance(t, list):
        named = {d.get("name"): d.get("template") for d in t if isinstance(d, dict)}
        t = named.get("default") or next(iter(named.values()), None)
    return str(t) if t else None


def _added_tokens(root: Path, tc: dict[str, Any]) -> list[tuple[int, str, bool]]:
    out: dict[int, tuple[str, bool]] = {}
    for i, t in (tc.get("added_tokens_decoder") or {}).items():
        out[int(i)] = (str(t["content"]), bool(t.get("special", True)))
    extra = root / "added_tokens.json"
    if extra.is_file():
        for text, i in json.loads(extra.read_text()).items():
            out.setdefault(int(i), (str(text), True))
    return [(i, t, s) for i, (t, s) in sorted(out.items())]


def _from_vocab_merges(root: Path, tc: dict[str, Any]) -> HFTokenizer:
    vocab = json.loads((root / "vocab.json").read_text())
    merges = [tuple(line.split()) for line in (root / "merges.txt").read_text(encoding="utf-8").splitlines()
              if line.strip() and not line.startswith("#version")]
    tok = HFTokenizer(BPE(vocab=vocab, merges=merges, fuse_unk=False, byte_fallback=False))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_SPLIT), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    for i, text, special in _added_tokens(root, tc):
        if tok.token_to_id(text) is not None:
            continue
        if i != tok.get_vocab_size(with_added_tokens=True):
            raise CheckpointError(f"{root}: added token {text!r} has id {i}, but the vocabulary has "
                                  f"{tok.get_vocab_size(with_added_tokens=True)} entries before it")
        tok.add_special_tokens([AddedToken(text, special=True, normalized=False)]) if special \
            else tok.add_tokens([AddedToken(text, normalized=False)])
    return tok


def load_tokenizer(root: Path) -> HFTokenizer:
    if (root / "tokenizer.json").is_file():
        return HFTokenizer.from_file(str(root / "tokenizer.json"))
    if (root / "vocab.json").is_file() and (root / "merges.txt").is_file():
        return _from_vocab_merges(root, tokenizer_config(root))
    raise CheckpointError(f"{root / 'tokenizer.json'}: tokenizer.json not found (nor vocab.json + merges.txt)")
