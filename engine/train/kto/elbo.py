"""Masked-diffusion ELBO log-likelihoods of whole completions, per example, with shared masks.

A batch holds, per (prompt, canvas) example and Monte-Carlo sample, the BD3-LM sequence
``[prompt, x0 (clean canvas), xt (noisy canvas)]`` (`engine.attention.bd3lm_layout`) and the noise
drawn by `engine.reward.draw_noise` — the gate's definition. `logp` evaluates −Σ CE / t over the
masked canvas tokens, averaged over the samples of an example. Calling it with the stacked LoRA off
(reference) and on (policy) over the **same** `ElboBatch` gives r = log π_θ − log π_ref with the mask
noise cancelling (policy == reference ⇒ r = 0 exactly). ``rows`` marks where the policy's LoRA acts:
from each prompt's last token on (`engine.loading.stacked`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from engine.attention import bd3lm_layout, bd3lm_logit_index
from engine.reward import T_MIN, draw_noise, masked_logp


@dataclass
class ElboBatch:
    ids: Tensor  # (R, L) rows = examples × samples, right-padded
    positions: Tensor  # (R, L)
    mask: Tensor  # (R, 1, L, L) bool
    rows: Tensor  # (R, L, 1) 1.0 where the policy LoRA acts (from the prompt's last token on)
    logit_index: Tensor  # (R, C)
    targets: Tensor  # (R, C)
    weights: Tensor  # (R, C) 1/t on masked canvas tokens, 0 elsewhere
    samples: int  # Monte-Carlo samples per example (rows are example-major)

    def to(self, device: torch.device | str) -> ElboBatch:
        return ElboBatch(self.ids.to(device), self.positions.to(device), self.mask.to(device),
                         self.rows.to(device), self.logit_index.to(device), self.targets.to(device),
                         self.weights.to(device), self.samples)


def make_elbo_batch(examples: Sequence[tuple[list[int], list[int]]], block_size: int, mask_id: int,
                    pad_id: int, gen: torch.Generator, *, samples: int = 1, t_min: float = T_MIN,
                    shifted: bool = True) -> ElboBatch:
    """examples: (prompt ids, canvas target ids); the last canvas block may be partial."""
    rows = []
    for prompt, target in examples:
        n, c = len(prompt), len(target)
        if c == 0 or n == 0:
            raise ValueError(f"bad example: prompt {n} tokens, canvas {c} (block size {block_size})")
        tgt = torch.tensor(target, dtype=torch.long)
        mask, pos = bd3lm_layout(n, c, block_size)
        idx = bd3lm_logit_index(n, c, block_size, shifted=shifted)
        for _ in range(samples):
            masked, w = draw_noise(c, block_size, gen, t_min)
            xt = torch.where(masked, torch.full_like(tgt, mask_id), tgt)
            rows.append((torch.cat([torch.tensor(prompt, dtype=torch.long), tgt, xt]), pos, mask, idx, tgt, w, n))
    L = max(r[0].numel() for r in rows)
    C = max(r[4].numel() for r in rows)
    R = len(rows)
    ids = torch.full((R, L), pad_id, dtype=torch.long)
    positions = torch.zeros((R, L), dtype=torch.long)
    amask = torch.eye(L, dtype=torch.bool).repeat(R, 1, 1)
    active = torch.zeros((R, L, 1))
    index = torch.zeros((R, C), dtype=torch.long)
    targets = torch.full((R, C), pad_id, dtype=torch.long)
    weights = torch.zeros((R, C))
    for b, (i, p, m, ix, t, w, n) in enumerate(rows):
        k, c = i.numel(), t.numel()
        ids[b, :k], positions[b, :k], amask[b, :k, :k] = i, p, m
        active[b, n - 1:k] = 1.0
        index[b, :c], targets[b, :c], weights[b, :c] = ix, t, w
    return ElboBatch(ids, positions, amask[:, None], active, index, targets, weights, samples)


def logp(model: nn.Module, batch: ElboBatch) -> Tensor:
    """(n_examples,) ELBO estimate of log p(canvas | prompt), averaged over the samples."""
    hidden = model(batch.ids, positions=batch.positions, mask=batch.mask, logits_slice=slice(0, 0))
    lp = masked_logp(model, hidden, batch.logit_index, batch.targets, batch.weights)
    return lp.view(-1, batch.samples).mean(-1)
