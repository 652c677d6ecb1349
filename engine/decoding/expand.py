"""DreamOn's variable-length infilling: a masked span that grows and shrinks while it is denoised.

The rule of DreamOn's published sampler (github.com/DreamLM/DreamOn ``eval/generator.py``,
``batch_generate_with_expand_as_token``; read in the fork github.com/yizhang-afk/dreamon):

* the span starts as ``INITIAL_MASKS`` masks between prefix and suffix (``eval_infill.yaml``: 4) and
  may hold at most ``max_len`` positions (``max_gen_len``, 64);
* each step predicts every masked position (the whole sequence is recomputed: its length changes)
  and unmasks the best-scored one(s);
* a position decided as ``<|expand|>`` becomes two masks (the expand logit is blocked once the span
  is at ``max_len``);
* a position decided as the end token (``<|endoftext|>``) is deleted, and so is every position still
  masked after it (``pad_eos_to_right`` then ``delete_eos_token``): the span ends there.

The span is done when no mask is left. DreamOn unmasks exactly one position per step (entropy
order); here the request's `SamplerConfig` picks them (``strategy="topk", tokens_per_step=1,
order="entropy"`` is DreamOn's; the default threshold strategy also takes every position with
confidence ≥ τ).
"""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import Tensor

from engine.decoding.sampler import choose_tokens, select_positions
from engine.types import CanvasSpec, FinishReason, SamplerConfig

INITIAL_MASKS = 4


class ExpandCanvas:
    """One DreamOn span (the `engine.decoding.sampler.Denoiser` surface the engine reads: ``canvas``, ``steps``,
    ``block``, ``finish``, ``spec``, ``output``)."""

    block = 0

    def __init__(self, spec: CanvasSpec, cfg: SamplerConfig, *, mask_id: int, expand_id: int,
                 end_ids: Iterable[int], newline_ids: Iterable[int] = (), suppress_ids: Iterable[int] = (),
                 initial: int = INITIAL_MASKS) -> None:
        self.spec, self.cfg = spec, cfg
        self.mask_id, self.expand_id = mask_id, expand_id
        self.end_ids = frozenset(end_ids)
        self.newline_ids = frozenset(newline_ids) if spec.single_line else frozenset()
        self.max_len = spec.length
        self.suppress = sorted({mask_id, *suppress_ids} - {expand_id} - self.end_ids)
        self.canvas = [mask_id] * max(1, min(initial, spec.length))
        self.conf = [0.0] * len(self.canvas)
        self.steps = self.expands = self.deletes = 0
        self.finish: FinishReason | None = None
        self.cut_chars: int | None = None  # no stop rule here: the output is never cut inside a token
        self._ended = False  # an end token closed the span
        self.last_remasked: list[int] = []  # never: DreamOn does not remask (the engine's step events read it)
        self.generator: torch.Generator | None = None

    @property
    def finished(self) -> bool:
        return self.finish is not None

    def abort(self) -> None:
        if self.finish is None:
            self.finish = "aborted"

    def masked(self) -> list[int]:
        """Span positions still masked (the rows the engine computes logits for, in order)."""
        return [i for i, t in enumerate(self.canvas) if t == self.mask_id]

    @torch.no_grad()
    def step(self, logits: Tensor) -> int:
        """``logits`` (M, V) predict the `masked()` positions; returns positions decided."""
        rows = self.masked()
        if not rows:
            return 0
        logits = logits.float().index_fill(1, torch.tensor(self.suppress, device=logits.device), float("-inf"))
        if len(self.canvas) >= self.max_len:
            logits[:, self.expand_id] = float("-inf")
        gen = None
        if self.cfg.temperature > 0:
            if self.generator is None:
                self.generator = torch.Generator(device=logits.device)
                self.generator.manual_seed(self.cfg.seed if self.cfg.seed is not None else 0)
            gen = self.generator
        tokens, conf, score = choose_tokens(logits, self.cfg, gen)
        picked = select_positions(conf.cpu(), score.cpu(), self.cfg)
        tok_l, conf_l = tokens.tolist(), conf.tolist()
        decided = {rows[k]: (int(tok_l[k]), float(conf_l[k])) for k in picked}
        ends = [p for p, (t, _) in decided.items() if t in self.end_ids]
        cut = min(ends) if ends else None
        new: list[int] = []
        confs: list[float] = []
        for i, t in enumerate(self.canvas):
            if cut is not None and i >= cut and (t == self.mask_id or i in decided):
                self.deletes += 1  # the end token, and every mask after it, is deleted
                continue
            if i not in decided:
                new.append(t)
                confs.append(self.conf[i])
            elif decided[i][0] == self.expand_id and len(new) + (len(self.canvas) - i) < self.max_len:
                new += [self.mask_id, self.mask_id]
                confs += [0.0, 0.0]
                self.expands += 1
            elif decided[i][0] == self.expand_id:  # no room left: stays masked
                new.append(self.mask_id)
                confs.append(0.0)
            else:
                new.append(decided[i][0])
                confs.append(decided[i][1])
        self.canvas, self.conf = new, confs
        self._ended |= cut is not None
        self.steps += 1
        if not self.masked():
            self.finish = "end" if self._ended else "length"
        return len(picked)

    def output(self) -> tuple[list[int], list[float]]:
        """The decided span (cut after the first newline token in single-line mode)."""
        ids: list[int] = []
        confs: list[float] = []
        for t, c in zip(self.canvas, self.conf, strict=True):
            if t == self.mask_id:
                break
            ids.append(t)
            confs.append(c)
            if t in self.newline_ids:
                break
        return ids, confs
