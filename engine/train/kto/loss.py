"""The KTO objective (Ethayarajh et al. 2024, arXiv 2402.01306), on per-example implicit rewards.

v(x, y) = λ_D σ(β (r − z0)) for desirable y, λ_U σ(β (z0 − r)) for undesirable y, with
r = log π_θ(y|x) − log π_ref(y|x) and z0 = KL(π_θ ‖ π_ref) estimated on mismatched pairs (x, y′) of
the batch, clamped at 0 and not back-propagated. Loss = mean(λ_y − v(x, y)).
λ_D, λ_U from the class balance: λ_D n_D / (λ_U n_U) = ``ratio`` ∈ [1, 4/3] (the paper's advice),
scaled so the larger λ is 1.
"""

from __future__ import annotations

import torch
from torch import Tensor


def class_weights(n_desirable: int, n_undesirable: int, ratio: float = 1.0) -> tuple[float, float]:
    """(λ_D, λ_U) with λ_D n_D / (λ_U n_U) = ``ratio`` and max(λ_D, λ_U) = 1."""
    if not 1.0 <= ratio <= 4 / 3 + 1e-9:
        raise ValueError(f"λ_D n_D / (λ_U n_U) should be in [1, 4/3] (KTO paper), got {ratio}")
    if n_desirable <= 0 or n_undesirable <= 0:
        return 1.0, 1.0  # one class only: nothing to balance
    lam_d, lam_u = ratio * n_undesirable / n_desirable, 1.0
    top = max(lam_d, lam_u)
    return lam_d / top, lam_u / top


def kl_reference(r_mismatched: Tensor) -> Tensor:
    """z0: mean implicit reward of mismatched pairs, clamped at 0, detached."""
    return r_mismatched.detach().mean().clamp(min=0.0)


def kto_loss(r: Tensor, z0: Tensor, desirable: Tensor, beta: float, lam_d: float, lam_u: float
             ) -> tuple[Tensor, dict[str, float]]:
    """r (B,) with grad, z0 () detached, desirable (B,) bool → (mean loss, metrics)."""
    z0 = z0.detach()
    d = desirable.to(torch.bool)
    v = torch.where(d, lam_d * torch.sigmoid(beta * (r - z0)), lam_u * torch.sigmoid(beta * (z0 - r)))
    lam = torch.where(d, torch.full_like(r, lam_d), torch.full_like(r, lam_u))
    loss = (lam - v).mean()
    with torch.no_grad():
        rd = r[d].mean().item() if d.any() else float("nan")
        ru = r[~d].mean().item() if (~d).any() else float("nan")
    return loss, {"loss": float(loss.detach()), "z0": float(z0), "r_desirable": rd, "r_undesirable": ru}
