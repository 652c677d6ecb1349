"""Remasking: put already-decided positions of the current block back to mask (error correction).

Masked diffusion decoders (LLaDA, Fast-dLLM, Dream) never revisit a token once it is unmasked.
Remasking samplers do: ReMDM (Wang et al. 2025, arXiv:2503.00307, github.com/kuleshov-group/remdm)
remasks decoded tokens with a per-step probability (its "conf" variant weights that by the
confidence each token had when it was decoded); WINO (Wide-In, Narrow-Out) drafts with a low
threshold and remasks drafted tokens whose re-verified confidence falls below a second, higher one.

Ours is the deterministic, cheap form: at each step the engine also computes the logits of the
current block's decided positions (same forward, more rows through the LM head), and those whose
probability of their own token is now below ``SamplerConfig.remask_threshold`` go back to mask.
The re-prediction sees the token itself as input (WINO verifies with a masked shadow copy of the
block instead, at twice the positions per forward): a model that copies its visible input will keep
its tokens, so this catches tokens the rest of the block now contradicts, not every weak guess.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor


@torch.no_grad()
def token_confidence(logits: Tensor, tokens: Sequence[int], temperature: float = 0.0) -> Tensor:
    """Probability each row of ``logits`` (M, V) gives ``tokens[row]`` (at ``temperature`` when
    sampling, as `engine.decoding.sampler.choose_tokens` scores; plain softmax when greedy) → (M,) on the CPU."""
    if logits.shape[0] == 0:
        return torch.zeros(0)
    x = logits.float()
    if temperature > 0:
        x = x / temperature
    probs = torch.softmax(x, dim=-1)
    idx = torch.tensor(list(tokens), device=logits.device, dtype=torch.long)[:, None]
    return probs.gather(-1, idx).squeeze(-1).cpu()


def pick_remask(conf: Sequence[float], threshold: float, limit: int) -> list[int]:
    """Indices of ``conf`` below ``threshold``, lowest first (ties: leftmost), at most ``limit``."""
    if limit <= 0:
        return []
    low = sorted((c, i) for i, c in enumerate(conf) if c < threshold)
    return sorted(i for _, i in low[:limit])
