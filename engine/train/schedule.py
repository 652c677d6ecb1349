"""The training schedule: the learning-rate curve (linear warmup, cosine to a floor, warm restarts) and its
length fitted to a wall-clock deadline (a GPU window) at the measured speed."""

from __future__ import annotations

import logging
import math
import time
from typing import Protocol

log = logging.getLogger(__name__)

__all__ = ["DeadlineFit", "Schedule", "fit_steps", "lr_at"]


class Schedule(Protocol):
    """What the schedule reads of `engine.train.trainer.TrainConfig`."""

    steps: int
    warmup: int
    min_lr_ratio: float
    schedule_start: int
    deadline: float


def lr_at(step: int, cfg: Schedule) -> float:
    """Linear warmup then cosine decay to ``min_lr_ratio``; a factor on the base rate. A warm restart
    (``schedule_start`` > 0) runs a new warmup + cosine from that step to ``steps``."""
    step -= cfg.schedule_start
    if step < cfg.warmup:
        return (step + 1) / cfg.warmup
    p = (step - cfg.warmup) / max(1, cfg.steps - cfg.schedule_start - cfg.warmup)
    return cfg.min_lr_ratio + (1 - cfg.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * min(1.0, p)))


def fit_steps(step: int, seconds_left: float, per_step: float, steps: int, *, safety: float = 0.97) -> int:
    """The schedule's last step when ``seconds_left`` remain at ``per_step`` seconds a step (at least one
    more step; ``steps`` itself when the speed is unknown)."""
    if per_step <= 0:
        return steps
    return step + max(1, int(seconds_left * safety / per_step))


class DeadlineFit:
    """``fit_deadline``: the schedule's length follows the measured speed. Fitted first at the end of warmup
    (average speed so far), then again at a quarter, half and three quarters of the fitted cosine with the
    speed since the last fit, so a speed change mid-run (a bench sharing the device, a thermal drop, a
    neighbour leaving) still ends the cosine at the deadline instead of cutting it short or idling at
    the floor. Each refit moves the cosine's phase by the relative change, no more."""

    MARKS = (0.25, 0.5, 0.75)

    def __init__(self) -> None:
        self.step = -1  # the step of the last fit; -1: not fitted yet
        self.time = 0.0
        self.base = 0  # the step of the first fit: the marks are fractions of the cosine from here
        self.left = list(self.MARKS)  # the fractions not refitted at yet (each once)
        self.mark = 0  # the step of the next refit; 0: none

    def due(self, step: int, cfg: Schedule) -> bool:
        if self.step < 0:
            return step == cfg.schedule_start + cfg.warmup
        return self.mark > 0 and step >= self.mark

    def fit(self, step: int, now: float, per_step_avg: float, cfg: Schedule) -> int:
        first = self.step < 0
        per_step = per_step_avg if first else (now - self.time) / max(1, step - self.step)
        steps = fit_steps(step, cfg.deadline - time.time(), per_step, cfg.steps)
        log.info("steps %s to the deadline: %d (%.3f s/step%s)", "fitted" if first else "refitted", steps,
                 per_step, "" if first else f", was {cfg.steps}")
        if first:
            self.base = step
        self.step, self.time = step, now
        marks = [(f, self.base + int((steps - self.base) * f)) for f in self.left]
        self.left = [f for f, m in marks if m > step]
        self.mark = next((m for _, m in marks if m > step), 0)
        return steps
