"""Block-diffusion (BD3-LM) training objective.

Sequence per example: [prompt (n), x0 canvas (c, clean), xt canvas (c, noisy)] with the mask and
positions of `engine.attention.bd3lm_layout` (the same block rule the sampler uses at inference).
Per canvas block a mask rate t ~ U(eps, 1) is drawn; each token is replaced by ``mask`` with
probability t (at least one per block). Loss = Σ over masked positions of CE / t, divided by the
number of canvas tokens (an ELBO-style estimate). Targets include the eom token and the pads, so the
model learns where a middle ends.

A rewrite's canvas is mostly the region copied: the few tokens that *change* it (`Example.changed`, the
target positions a token diff against the region does not match) are what a next edit is about. ``emphasis``
multiplies their weight (1: the plain loss, under which a model can predict them no better on the sessions it
trained on than on held-out ones — underfit, docs/QUALITY.md), and the metrics report them apart
(``changed_acc`` / ``changed_ce``): the copy tokens' accuracy (0.8+) otherwise hides whether edits are learned.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from engine.attention import bd3lm_layout, bd3lm_logit_index


@dataclass
class Batch:
    ids: Tensor  # (B, L) [prompt, x0, xt], right-padded
    positions: Tensor  # (B, L)
    mask: Tensor  # (B, 1, L, L) bool, True = attend
    logit_index: Tensor  # (B, C) index of the output predicting canvas token j (C = max canvas)
    targets: Tensor  # (B, C) clean canvas ids
    weights: Tensor  # (B, C) 1/t on masked positions (× emphasis where changed), 0 elsewhere (and on padding)
    n_tokens: int  # canvas tokens in the batch (the loss' denominator)
    changed: Tensor | None = None  # (B, C) bool: positions that change a rewrite's region (None: no such example)


def noise_canvas(target: Tensor, block_size: int, mask_id: int, gen: torch.Generator,
                 eps: float = 1e-3) -> tuple[Tensor, Tensor]:
    """target (c,) → (xt (c,), weight (c,)): per-block rate t ~ U(eps, 1), weight 1/t where masked."""
    c = target.numel()
    nb = -(-c // block_size)
    t = eps + (1 - eps) * torch.rand(nb, generator=gen)
    t_pos = t.repeat_interleave(block_size)[:c]
    masked = torch.rand(c, generator=gen) < t_pos
    for b in range(nb):  # at least one masked token per block
        lo, hi = b * block_size, min(c, (b + 1) * block_size)
        if not masked[lo:hi].any():
            masked[lo + int(torch.randint(hi - lo, (1,), generator=gen))] = True
    xt = torch.where(masked, torch.full_like(target, mask_id), target)
    return xt, masked.float() / t_pos


def make_batch(examples: Sequence[tuple[list[int], list[int]] | tuple[list[int], list[int], Sequence[int]]],
               block_size: int, mask_id: int, pad_id: int, gen: torch.Generator, *, shifted: bool = True,
               eps: float = 1e-3, emphasis: float = 1.0) -> Batch:
    """examples: (prompt ids, canvas target ids[, changed target positions]) with len(target) % block_size
    == 0; ``emphasis`` multiplies the loss weight of the changed positions."""
    if emphasis <= 0:
        raise ValueError(f"emphasis {emphasis}: must be > 0")
    rows, flags = [], []
    for ex in examples:
        prompt, target = ex[0], ex[1]
        changed = ex[2] if len(ex) > 2 else ()  # type: ignore[misc]
        n, c = len(prompt), len(target)
        if c == 0 or c % block_size or n == 0:
            raise ValueError(f"bad example: prompt {n} tokens, canvas {c} (block size {block_size})")
        tgt = torch.tensor(target, dtype=torch.long)
        xt, w = noise_canvas(tgt, block_size, mask_id, gen, eps)
        flag = torch.zeros(c, dtype=torch.bool)
        if len(changed):
            at = torch.tensor(list(changed), dtype=torch.long)
            if int(at.min()) < 0 or int(at.max()) >= c:
                raise ValueError(f"bad example: changed position outside its canvas of {c} tokens")
            flag[at] = True
            w = torch.where(flag, w * emphasis, w)
        flags.append(flag)
        mask, pos = bd3lm_layout(n, c, block_size)
        idx = bd3lm_logit_index(n, c, block_size, shifted=shifted)
        ids = torch.cat([torch.tensor(prompt, dtype=torch.long), tgt, xt])
        rows.append((ids, pos, mask, idx, tgt, w))
    L = max(r[0].numel() for r in rows)
    C = max(r[4].numel() for r in rows)
    B = len(rows)
    ids = torch.full((B, L), pad_id, dtype=torch.long)
    positions = torch.zeros((B, L), dtype=torch.long)
    mask = torch.eye(L, dtype=torch.bool).repeat(B, 1, 1)  # padding rows attend to themselves only
    index = torch.zeros((B, C), dtype=torch.long)
    targets = torch.full((B, C), pad_id, dtype=torch.long)
    weights = torch.zeros((B, C))
    changed_all = torch.zeros((B, C), dtype=torch.bool)
    n_tokens = 0
    for b, (i, p, m, ix, t, w) in enumerate(rows):
        n, c = i.numel(), t.numel()
        ids[b, :n], positions[b, :n], mask[b, :n, :n] = i, p, m
        index[b, :c], targets[b, :c], weights[b, :c] = ix, t, w
        changed_all[b, :c] = flags[b]
        n_tokens += c
    return Batch(ids, positions, mask[:, None], index, targets, weights, n_tokens,
                 changed_all if bool(changed_all.any()) else None)


def batch_to(batch: Batch, device: torch.device | str) -> Batch:
    return Batch(batch.ids.to(device), batch.positions.to(device), batch.mask.to(device),
                 batch.logit_index.to(device), batch.targets.to(device), batch.weights.to(device),
                 batch.n_tokens, None if batch.changed is None else batch.changed.to(device))


def bd3_loss(model: nn.Module, batch: Batch) -> tuple[Tensor, dict[str, float]]:
    """Weighted masked-token CE (the training loss) and plain metrics (unweighted CE, accuracy; the same
    over the masked changed positions, with their count, when the batch has any)."""
    hidden = model(batch.ids, positions=batch.positions, mask=batch.mask, logits_slice=slice(0, 0))
    h = torch.gather(hidden, 1, batch.logit_index[..., None].expand(-1, -1, hidden.shape[-1]))  # (B, C, dim)
    logits = model.logits(h).float()  # (B, C, V)
    ce = F.cross_entropy(logits.flatten(0, 1), batch.targets.flatten(), reduction="none").view_as(batch.weights)
    loss = (ce * batch.weights).sum() / batch.n_tokens
    masked = batch.weights > 0
    with torch.no_grad():
        n_masked = int(masked.sum())
        hit = logits.argmax(-1) == batch.targets
        acc = float(hit[masked].float().mean()) if n_masked else 0.0
        plain = float(ce[masked].mean()) if n_masked else 0.0
        out = {"loss": float(loss.detach()), "masked_ce": plain, "masked_acc": acc, "masked": n_masked}
        if batch.changed is not None:
            sel = masked & batch.changed
            k = int(sel.sum())
            out.update(changed_masked=k, changed_acc=float(hit[sel].float().mean()) if k else 0.0,
                       changed_ce=float(ce[sel].mean()) if k else 0.0)
    return loss, out


def fixed_noise_pass(model: nn.Module, examples: Sequence[object], block_size: int, mask_id: int,
                     pad_id: int, *, batch_size: int, seed: int = 1234, shifted: bool = True,
                     dtype: torch.dtype = torch.float32) -> dict[str, float | int | None]:
    """One BD3 pass over ``examples`` (``prompt``, ``target``, ``changed``) with the same masks every call —
    comparable across steps and adapters: the plain loss (a mean over examples), and accuracy / CE of all
    masked tokens, of the changed ones (a rewrite's edit) and of the copied ones (means over tokens). The
    trainer's validation and ``train edit-tokens`` both read it."""
    dev = next(model.parameters()).device
    gen = torch.Generator().manual_seed(seed)
    sums = {"masked": 0, "hit": 0.0, "ce": 0.0, "changed": 0, "changed_hit": 0.0, "changed_ce": 0.0,
            "loss": 0.0}
    with torch.no_grad():
        for i in range(0, len(examples), batch_size):
            chunk = examples[i:i + batch_size]
            b = make_batch([(e.prompt, e.target, e.changed) for e in chunk],  # type: ignore[attr-defined]
                           block_size, mask_id, pad_id, gen, shifted=shifted)
            with torch.autocast(dev.type, dtype=dtype, enabled=dtype != torch.float32):
                _, m = bd3_loss(model, batch_to(b, dev))
            n, k = int(m["masked"]), int(m.get("changed_masked", 0))
            sums["masked"] += n
            sums["hit"] += m["masked_acc"] * n
            sums["ce"] += m["masked_ce"] * n
            sums["changed"] += k
            sums["changed_hit"] += m.get("changed_acc", 0.0) * k
            sums["changed_ce"] += m.get("changed_ce", 0.0) * k
            sums["loss"] += m["loss"] * len(chunk)
    n, k = int(sums["masked"]), int(sums["changed"])
    copy = n - k
    return {"examples": len(examples), "masked": n, "changed_masked": k,
            "loss": sums["loss"] / max(1, len(examples)),
            "masked_acc": sums["hit"] / n if n else None,
            "masked_ce": sums["ce"] / n if n else None,
            "changed_acc": sums["changed_hit"] / k if k else None,
            "changed_ce": sums["changed_ce"] / k if k else None,
            "copy_acc": (sums["hit"] - sums["changed_hit"]) / copy if copy else None,
            "copy_ce": (sums["ce"] - sums["changed_ce"]) / copy if copy else None,
            "changed_loss_share": sums["changed_ce"] / sums["ce"] if sums["ce"] else None}
