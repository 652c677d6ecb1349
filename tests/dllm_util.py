"""Helpers of the issue-16 engine tests: a tokenizer holding the registry models' token texts, tiny
random engines in each regime, and a scripted model whose logits a test chooses."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from tokenizers import Tokenizer as HFTokenizer
from tokenizers import decoders, models, pre_tokenizers
from torch import Tensor, nn

from engine.config import ModelArgs, preset
from engine.engine import Engine
from engine.loading.common import make_tokenizer
from engine.model import Transformer

SPECIALS = ("<|endoftext|>", "<|beginoftext|>", "<|mask|>", "<|expand|>", "<|im_start|>", "<|im_end|>",
            "<|file_sep|>", "<|startoftext|>", "<|mdm_mask|>", "<|eot_id|>")
DREAM = {"registry": "Dream-org/Dream-Coder-v0-Base-7B", "bos_token": "<|beginoftext|>"}
DREAM_INSTRUCT = {"registry": "Dream-org/Dream-Coder-v0-Instruct-7B", "bos_token": "<|beginoftext|>"}
DREAMON = {"registry": "Dream-org/DreamOn-v0-7B", "bos_token": "<|beginoftext|>"}
LLADA = {"registry": "GSAI-ML/LLaDA-8B-Base", "bos_token": "<|startoftext|>"}


def registry_tokenizer(mask: str = "<|mask|>", specials: Sequence[str] = SPECIALS) -> Any:
    """A byte-level BPE tokenizer holding the registered models' special tokens (``specials``)."""
    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    vocab = {ch: i for i, ch in enumerate(alphabet)}
    for t in specials:
        vocab[t] = len(vocab)
    hf = HFTokenizer(models.BPE(vocab=vocab, merges=[]))
    hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    hf.decoder = decoders.ByteLevel()
    hf.add_special_tokens(list(specials))
    return make_tokenizer(hf, eos_token="<|endoftext|>", source="test", mask_id=hf.token_to_id(mask))


def tid(tok: Any, text: str) -> int:
    return int(tok.hf.token_to_id(text))


def tiny_engine(meta: dict[str, Any] | None, *, attention: str = "bidirectional", shifted: bool = True,
                block_size: int = 8, block_align: str = "canvas", approx_cache: bool = True, seed: int = 0,
                tok: Any = None, mask: str = "<|mask|>") -> Engine:
    tok = tok or registry_tokenizer(mask)
    args = preset("tiny", vocab_size=tok.vocab_size, attention=attention, shifted_logits=shifted,
                  block_size=block_size, block_align=block_align, special_tokens=tok.special.as_dict())
    model = Transformer(args, init=False).init_random(seed)
    return Engine(model, tok, name="tiny", meta=meta, approx_cache=approx_cache)


class ForwardCounter:
    """Counts the model's forward calls (wraps ``eng.model.forward``)."""

    def __init__(self, eng: Engine) -> None:
        self.calls = 0
        self.widths: list[tuple[int, int]] = []
        inner = eng.model.forward

        def counted(ids: Tensor, *a: Any, **kw: Any) -> Tensor:
            self.calls += 1
            self.widths.append(tuple(ids.shape))  # type: ignore[arg-type]
            return inner(ids, *a, **kw)

        eng.model.forward = counted  # type: ignore[method-assign]


Rule = Callable[[list[int], int], tuple[int, float]]  # (sequence, predicted position) -> (token, logit)


class ScriptedModel(nn.Module):
    """A "model" whose prediction for position p of a sequence is ``rule(sequence, p)``: the token
    gets that logit, every other token 0. Hidden states carry (row, position); ``logits`` applies the
    rule to the sequences of the last forward (shifted: the state at p - 1 predicts p)."""

    def __init__(self, args: ModelArgs, rule: Rule) -> None:
        super().__init__()
        self.args, self.rule = args, rule
        self.dummy = nn.Parameter(torch.zeros(1))
        self.seqs: list[list[int]] = []
        self.history: list[list[int]] = []

    def forward(self, ids: Tensor, positions: Tensor | None = None, mask: Tensor | None = None, *,
                is_causal: bool = False, cache: Any = None, offset: Any = 0, logits_slice: Any = None) -> Tensor:
        assert cache is None, "scripted: full forwards only (approx_cache=False)"
        self.seqs = ids.tolist()
        self.history.extend(self.seqs)
        B, T = ids.shape
        rows = torch.arange(B, dtype=torch.float32)[:, None].expand(B, T)
        pos = torch.arange(T, dtype=torch.float32)[None, :].expand(B, T)
        return torch.stack([rows, pos], dim=-1)

    def logits(self, h: Tensor) -> Tensor:
        flat = h.reshape(-1, 2)
        out = torch.zeros(flat.shape[0], self.args.vocab_size)
        shift = 1 if self.args.shifted_logits else 0
        for k, (b, p) in enumerate(flat.tolist()):
            token, logit = self.rule(self.seqs[int(b)], int(p) + shift)
            out[k, token] = logit
        return out.reshape(*h.shape[:-1], self.args.vocab_size)


def scripted_engine(meta: dict[str, Any], rule: Rule, *, shifted: bool = True) -> tuple[Engine, ScriptedModel]:
    tok = registry_tokenizer()
    args = preset("tiny", vocab_size=tok.vocab_size, attention="bidirectional", shifted_logits=shifted,
                  special_tokens=tok.special.as_dict())
    model = ScriptedModel(args, rule)
    return Engine(model, tok, name="scripted", meta=meta, approx_cache=False), model  # type: ignore[arg-type]
