"""Masked-diffusion decoding of one canvas, block by block (model-agnostic, no_grad).

`Denoiser` holds one request's canvas; the engine feeds it, per step, the logits that predict the
current block's positions (already aligned for shifted / unshifted models) and it unmasks:

* ``threshold`` (Fast-dLLM): the best-scored masked position plus every other with confidence
  ≥ τ — the number of steps adapts to how sure the model is;
* ``topk`` (LLaDA low-confidence remasking): a fixed ``tokens_per_step`` best positions.

Scores: ``confidence`` (prob of the chosen token), ``margin`` (top1 − top2), ``entropy``
(negative entropy). Greedy at temperature 0, else temperature + top-p sampling from a seeded
generator. Variable length: positions after the first decided end/pad token are never decoded
and the canvas finishes once everything before it is decided; single-line mode does the same at
the first token containing a newline.

Window mode (`set_window`): the engine chooses the active positions (the first masked position and
a few after it) instead of a fixed block; ``step(..., force_first=True)`` always decides the leftmost
one, so the decided prefix grows every step and can be committed to the KV cache. A ``stop_rule``
sees the decided prefix and may end the canvas early (multi-line: the cursor's scope closed, finish
"scope"; a loop began, "loop": `engine.decoding.stops.loop_cut`; a single line grew too long, "long").

Remasking (``SamplerConfig.remask``, block mode only — see `engine.decoding.remask`): `logit_rows()` adds the
block's decided positions to the rows the engine computes, and `step` puts those whose token's
probability fell below ``remask_threshold`` back to mask (they are re-decided by later steps). Window
modes ignore it: their decided prefix is already in the KV cache.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable

import torch
from torch import Tensor

from engine.decoding.remask import pick_remask, token_confidence
from engine.types import STOP_RULE_KINDS, CanvasSpec, FinishReason, SamplerConfig


@torch.no_grad()
def choose_tokens(logits: Tensor, cfg: SamplerConfig, generator: torch.Generator | None = None
                  ) -> tuple[Tensor, Tensor, Tensor]:
    """logits (M, V) → (tokens (M,), confidence (M,), score (M,)); higher score = decode first."""
    logits = logits.float()
    if cfg.temperature > 0:
        probs = torch.softmax(logits / cfg.temperature, dim=-1)
        if cfg.top_p < 1.0:
            sp, si = probs.sort(dim=-1, descending=True)
            keep = (sp.cumsum(-1) - sp) < cfg.top_p  # always keeps the top token
            sp = torch.where(keep, sp, torch.zeros_like(sp))
            probs = torch.zeros_like(probs).scatter(-1, si, sp)
            probs = probs / probs.sum(-1, keepdim=True)
        tokens = torch.multinomial(probs, 1, generator=generator).squeeze(-1)
    else:
        probs = torch.softmax(logits, dim=-1)
        tokens = probs.argmax(-1)
    conf = probs.gather(-1, tokens[:, None]).squeeze(-1)
    if cfg.order == "margin":
        top2 = probs.topk(2, dim=-1).values
        score = top2[:, 0] - top2[:, 1]
    elif cfg.order == "entropy":
        score = (probs * torch.log(probs.clamp_min(1e-12))).sum(-1)  # = -entropy
    else:
        score = conf
    return tokens, conf, score


def select_positions(conf: Tensor, score: Tensor, cfg: SamplerConfig, minimum: int = 1) -> list[int]:
    """Indices (into the candidate list) to unmask this step.

    threshold: argmax of ``score`` plus every candidate with ``conf >= cfg.threshold``;
    topk: the ``cfg.tokens_per_step`` best scores. At least ``minimum`` (step budget)."""
    m = conf.shape[0]
    if m == 0:
        return []
    if cfg.strategy == "topk":
        k = max(cfg.tokens_per_step, minimum)
    else:
        k = minimum
    order = torch.argsort(score, descending=True, stable=True)
    chosen = set(order[: min(k, m)].tolist())
    if cfg.strategy == "threshold":
        chosen.add(int(order[0]))
        chosen.update(torch.nonzero(conf >= cfg.threshold).flatten().tolist())
    return sorted(chosen)


def drop_adjacent_repeats(cand: list[int], picked: list[int], tokens: list[int],
                          exempt: Iterable[int] = ()) -> list[int]:
    """``picked`` without the positions that repeat their left neighbour's token when both are decided in
    this step: each was predicted seeing a mask where the other goes, which is how parallel decoding writes
    ``idx,, elem``, ``-= -=`` or ``for c c in`` (HumanEval multi-line middles on the Qwen BD3 tier;
    docs/QUALITY.md). The dropped position stays masked and is decided again next step with its
    neighbour known (a real repeat comes back at the cost of one step). ``exempt``: tokens that legitimately
    run (the end and pad tokens of `_end_run`)."""
    chosen = set(picked)
    where = {c: j for j, c in enumerate(cand)}
    skip = set(exempt)
    out = []
    for j in picked:
        left = where.get(cand[j] - 1)
        if left is not None and left in chosen and tokens[left] == tokens[j] and tokens[j] not in skip:
            continue
        out.append(j)
    return out


class Denoiser:
    """One canvas being denoised block by block."""

    def __init__(self, spec: CanvasSpec, cfg: SamplerConfig, *, mask_id: int, end_ids: Iterable[int],
                 newline_ids: Iterable[int] = (), block_size: int,
                 suppress_ids: Iterable[int] = (),
                 stop_rule: Callable[[list[int]], tuple[int, FinishReason, int] | None] | None = None) -> None:
        if spec.length <= 0:
            raise ValueError("canvas length must be positive")
        self.spec, self.cfg = spec, cfg
        self.mask_id = mask_id
        self.end_ids = frozenset(end_ids) if spec.stop_at_end else frozenset()
        self.run_ids = frozenset(end_ids)  # tokens that legitimately repeat within one step (end, pads)
        self.newline_ids = frozenset(newline_ids) if spec.single_line else frozenset()
        self.block_size = block_size
        # never generated (mask, prompt markers), except a marker the format ends on (Qwen's <|file_sep|>)
        self.suppress = sorted({mask_id, *suppress_ids} - frozenset(end_ids))
        self.canvas = [mask_id] * spec.length
        self.conf = [0.0] * spec.length
        self.decided = [False] * spec.length
        self.block = 0
        self.steps = 0
        self.block_steps = 0
        self.finish: FinishReason | None = None
        self._stop = min(spec.length, spec.keep or spec.length)  # positions >= this are not needed
        self._stop_kind: FinishReason | None = None
        self.stop_rule = stop_rule  # decided prefix ids -> (tokens to keep, finish kind, characters) or None
        self.cut_chars: int | None = None  # a stop rule's cut: the output text ends at this character
        self.prefix = 0  # length of the decided prefix (every position before it is decided)
        self.window: tuple[int, int] | None = None  # window mode: the active positions
        self.confident = 0  # candidates of the last step with confidence >= threshold
        self.generator: torch.Generator | None = None  # created on the logits' device
        self.remasks = 0  # decided positions put back to mask so far (≤ cfg.remask_budget)
        self.last_remasked: list[int] = []  # canvas positions remasked by the last step

    # ---- geometry --------------------------------------------------------------------------
    @property
    def n_blocks(self) -> int:
        return -(-self.spec.length // self.block_size)

    def block_range(self, b: int | None = None) -> tuple[int, int]:
        if b is None and self.window is not None:
            return self.window
        b = self.block if b is None else b
        s = b * self.block_size
        return s, min(s + self.block_size, self.spec.length)

    def block_ids(self) -> list[int]:
        s, e = self.block_range()
        return self.canvas[s:e]

    def set_window(self, lo: int, hi: int) -> None:
        """Window mode: the active positions are ``[lo, hi)`` (clipped to the needed canvas)."""
        self.window = (lo, max(lo, min(hi, self._stop)))

    @property
    def needed(self) -> int:
        """Canvas positions that still matter (``keep``, first end token, newline, scope)."""
        return self._stop

    def candidates(self) -> list[int]:
        """Block-relative indices of masked positions that still matter."""
        s, e = self.block_range()
        return [i - s for i in range(s, min(e, self._stop)) if not self.decided[i]]

    def remask_room(self) -> int:
        """Decided positions the next step may put back to mask (0: remasking off, window mode,
        budget spent, or the last step of a ``max_steps`` budget)."""
        cfg = self.cfg
        if cfg.remask == "off" or self.window is not None:
            return 0
        if cfg.max_steps and cfg.max_steps - self.block_steps <= 1:
            return 0
        return max(0, min(cfg.remask_per_step, cfg.remask_budget - self.remasks))

    def revisable(self) -> list[int]:
        """Block-relative indices of decided positions that may be remasked: those still needed,
        plus the end token that ends the canvas (an early end is a typical error)."""
        s, e = self.block_range()
        hi = self._stop + 1 if self._stop_kind == "end" else self._stop
        return [i - s for i in range(s, min(e, hi)) if self.decided[i]]

    def logit_rows(self) -> list[int]:
        """Block-relative positions the engine should compute logits for: `candidates()`, plus
        `revisable()` when this step may remask."""
        cand = self.candidates()
        if not cand or not self.remask_room():
            return cand
        return sorted({*cand, *self.revisable()})

    @property
    def finished(self) -> bool:
        return self.finish is not None

    def block_done(self) -> bool:
        return not self.candidates()

    def _generator(self, device: torch.device) -> torch.Generator | None:
        if self.cfg.temperature <= 0:
            return None
        if self.generator is None or self.generator.device != device:
            self.generator = torch.Generator(device=device)
            self.generator.manual_seed(self.cfg.seed if self.cfg.seed is not None else 0)
        return self.generator

    # ---- one step ----------------------------------------------------------------------------
    @torch.no_grad()
    def step(self, logits: Tensor, rows: list[int] | None = None, force_first: bool = False,
             take_all: bool = False) -> int:
        """``logits`` (M, V) predict block positions ``rows`` (default: `logit_rows()`); rows
        that are masked are candidates, decided ones are checked for remasking (`remask_room`).
        ``force_first``: the first candidate is decided whatever its score (window mode);
        ``take_all``: every candidate is (verified drafts)."""
        rows = self.logit_rows() if rows is None else rows
        s, _ = self.block_range()
        room = self.remask_room()  # 0: every row is a candidate (window mode re-decides drafts)
        back = [k for k, r in enumerate(rows) if self.decided[s + r]] if room else []
        keep = [k for k, r in enumerate(rows) if not (room and self.decided[s + r])]
        cand = [rows[k] for k in keep]
        self.last_remasked = []
        if not cand:
            return 0
        sup = torch.tensor(self.suppress, device=logits.device)
        logits = logits.float().index_fill(1, sup, float("-inf"))  # out of place
        if back:
            pos = [s + rows[k] for k in back]
            conf_back = token_confidence(logits[back], [self.canvas[p] for p in pos], self.cfg.temperature)
            self.last_remasked = [pos[i] for i in pick_remask(conf_back.tolist(), self.cfg.remask_threshold, room)]
        if back:
            logits = logits[keep]
        tokens, conf, score = choose_tokens(logits, self.cfg, self._generator(logits.device))
        minimum = 1
        if self.cfg.max_steps:  # finish the block within the step budget
            left = max(1, self.cfg.max_steps - self.block_steps)
            minimum = math.ceil(len(cand) / left)
        picked = select_positions(conf.cpu(), score.cpu(), self.cfg, minimum)
        picked = sorted({*picked, *self._end_run(cand, tokens, conf), *([0] if force_first else []),
                         *(range(len(cand)) if take_all else [])})
        self.confident = int((conf >= self.cfg.threshold).sum())
        tok_l, conf_l = tokens.tolist(), conf.tolist()  # one device sync
        if (not take_all and self.cfg.strategy == "threshold" and self.cfg.threshold > 0
                and not self.cfg.max_steps and self.cfg.remask == "off"):
            # (verified drafts were decided causally: their repeats are the model's own; τ 0 asks for every
            # position at once; a step budget or a top-k schedule fixes how many positions a step decides;
            # remasking revisits decided tokens itself)
            picked = drop_adjacent_repeats(cand, picked, tok_l, self.run_ids)
        for j in picked:
            p = s + cand[j]
            self.canvas[p] = int(tok_l[j])
            self.conf[p] = float(conf_l[j])
            self.decided[p] = True
        for p in self.last_remasked:  # decided in an earlier step: back to mask, re-decided later
            self.canvas[p], self.conf[p], self.decided[p] = self.mask_id, 0.0, False
        if self.last_remasked:
            self.remasks += len(self.last_remasked)
            self._reset_stop(min(self.last_remasked))
        self.steps += 1
        self.block_steps += 1
        self._update_stop()
        return len(picked)

    def _end_run(self, cand: list[int], tokens: Tensor, conf: Tensor) -> list[int]:
        """Candidates (indices into ``cand``) forming a trailing run of predicted end tokens.

        The canvas is ``content, eom, pad, ...``: when every still-needed masked position from some
        point to the end of the block is predicted to be an end token, with mean confidence
        ≥ ``cfg.end_run_threshold``, the whole run is committed in one step instead of one pad per
        step (everything after the first end token is discarded anyway)."""
        tau = self.cfg.end_run_threshold
        if tau is None or not self.end_ids or not cand:
            return []
        s, e = self.block_range()
        if min(e, self._stop) - s - 1 != cand[-1]:  # the block's last needed position must be masked
            return []
        is_end = [int(t) in self.end_ids for t in tokens.tolist()]
        j = len(cand)
        while j > 0 and is_end[j - 1]:
            if j < len(cand) and any(self.canvas[s + i] not in self.end_ids  # decided content inside
                                     for i in range(cand[j - 1] + 1, cand[j])):
                break
            j -= 1
        run = list(range(j, len(cand)))
        if len(run) < 2 or float(conf[run].mean()) < tau:
            return []
        return run

    def _reset_stop(self, lo: int) -> None:
        """Positions from ``lo`` on were remasked: forget the stop found from decided tokens (an
        end / newline token may have been remasked; `_update_stop` finds it again from the decided
        ones) and shorten the decided prefix to ``lo``."""
        self._stop = min(self.spec.length, self.spec.keep or self.spec.length)
        self._stop_kind = None
        self.cut_chars = None
        self.prefix = min(self.prefix, lo)

    def _update_stop(self) -> None:
        for i in range(self._stop):
            if self.decided[i] and self.canvas[i] in self.end_ids:
                self._stop, self._stop_kind = i, "end"
                break
            if self.decided[i] and self.canvas[i] in self.newline_ids:
                self._stop, self._stop_kind = i + 1, "newline"
                break
        p = self.prefix
        while p < self._stop and self.decided[p]:
            p += 1
        if p > self.prefix:
            self.prefix = p
            if self.stop_rule is not None:
                stop = self.stop_rule(self.canvas[:p])
                if stop is not None and stop[0] < self._stop:
                    self._stop, self._stop_kind, self.cut_chars = max(0, stop[0]), stop[1], stop[2]
        if self.prefix >= self._stop:
            self.finish = self._stop_kind or "length"

    def next_block(self) -> bool:
        """Move to the next block; False when there is none (finish = "length")."""
        if self.block + 1 >= self.n_blocks or self.block_range(self.block + 1)[0] >= self._stop:
            if self.finish is None:
                self.finish = "length"
            return False
        self.block += 1
        self.block_steps = 0
        return True

    def abort(self) -> None:
        if self.finish is None:
            self.finish = "aborted"

    # ---- result ------------------------------------------------------------------------------
    def output(self) -> tuple[list[int], list[float]]:
        """Decided ids up to the first end token / newline token (inclusive) / still-masked slot."""
        ids: list[int] = []
        confs: list[float] = []
        for i in range(self._stop if self._stop_kind in STOP_RULE_KINDS else self.spec.length):
            if not self.decided[i] or self.canvas[i] in self.end_ids:
                break
            ids.append(self.canvas[i])
            confs.append(self.conf[i])
            if self.canvas[i] in self.newline_ids:
                break
        return ids, confs
