"""Numerical guards shared by the training loops (block diffusion and KTO).

Two failures seen on real hardware, each guarded here:

- **cuDNN attention backward on Hopper.** With an explicit attention mask, a sequence length with
  ``L % 128 == 64`` and a query row whose log-sum-exp is below ln(FLT_MAX) ≈ -88.7, the cuDNN SDPA
  backward returns NaN in dQ (pytorch/pytorch#196678; reached through Qwen2.5's massive-activation
  heads, huggingface/trl#7181). Our BD3 batches carry a block mask and every length, so a
  Qwen2.5-Coder run on an H200 (torch 2.11) goes NaN within its first hundred steps. Training turns the cuDNN backend
  off; the memory-efficient and flash kernels are clean on the same inputs. Serving runs no backward.
- **A non-finite step.** Whatever its cause, a NaN or inf gradient must not reach the weights: the
  update is skipped (the optimizer state is kept) and counted; ``max_in_row`` skipped steps in a row
  mean the run diverged, and the loop stops with the last finite weights.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable

import torch
from torch import Tensor

log = logging.getLogger(__name__)


def attention_for_training(device: torch.device) -> bool:
    """Turn cuDNN SDPA off on CUDA (see the module doc); True when it was on."""
    if device.type != "cuda" or not torch.backends.cuda.cudnn_sdp_enabled():
        return False
    torch.backends.cuda.enable_cudnn_sdp(False)
    log.info("training attention: cuDNN SDPA off (its masked backward returns NaN dQ on Hopper for "
             "L % 128 == 64, pytorch#196678); memory-efficient / flash kernels instead")
    return True


class StepGuard:
    """Clip, then step only on a finite gradient norm; counts skipped steps."""

    def __init__(self, opt: torch.optim.Optimizer, params: Iterable[Tensor], *, max_norm: float = 1.0,
                 max_in_row: int = 20) -> None:
        self.opt, self.params, self.max_norm, self.max_in_row = opt, list(params), max_norm, max_in_row
        self.skipped = 0
        self.in_row = 0

    @property
    def diverged(self) -> bool:
        return self.in_row >= self.max_in_row

    def step(self, step: int) -> float:
        """Apply (or skip) the accumulated gradients; returns the pre-clip norm (nan/inf when skipped)."""
        norm = float(torch.nn.utils.clip_grad_norm_(self.params, self.max_norm))
        if math.isfinite(norm):
            self.opt.step()
            self.in_row = 0
        else:
            self.skipped += 1
            self.in_row += 1
            log.warning("step %d: gradient norm %s: update skipped (%d in a row, %d in all)", step, norm,
                        self.in_row, self.skipped)
        self.opt.zero_grad(set_to_none=True)
        return norm
