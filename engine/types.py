"""Plain request/result types of the engine's public API (no torch, no LSP)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any, Literal

# (confidences of the decided output so far, positions still open) -> stop now?
GiveUp = Callable[[list[float], int], bool]


@dataclass
class SamplerConfig:
    """How a masked canvas is denoised.

    strategy:    "threshold" = Fast-dLLM: per step unmask the most confident masked position plus
                 every other one with confidence >= ``threshold``; "topk" = LLaDA-style fixed
                 ``tokens_per_step`` per step (low-confidence remasking).
    order:       score used to rank positions: "confidence" (max prob), "margin" (top1 - top2),
                 "entropy" (negative entropy).
    temperature: 0 = greedy; > 0 samples (with ``top_p``) using ``seed``.
    block_size:  canvas is decoded block by block, left to right (semi-autoregressive).
    window:      positions a step computes, for block-causal models: "block" = the whole current
                 block (the trained layout, batched), an int = a fixed window of that many
                 positions after the decided prefix (1 = autoregressive cost), "adaptive" = a window
                 that halves when a step unmasks one token and doubles when every position was
                 confident (between 1 and ``window_max``, ``single_line_window`` (1) for single-line
                 canvases). In window modes the leftmost masked position is decided every step and
                 the decided prefix is committed to the KV cache (causally) as it grows. None = the
                 engine's default (adaptive on a CPU, block elsewhere).
    speculate:   window modes at width 1: verify up to this many draft tokens per forward, copied
                 from the prompt where its last tokens occur there (prompt lookup; greedy only,
                 output identical to decoding without it). None = the engine's default;
                 ``single_line_speculate`` caps it for single-line canvases.
    give_up:     called after each step with the confidences of the decided output so far and the
                 number of positions still open; True stops the request (finish "gave_up") — the
                 gate's "this can no longer reach the show threshold".
    remask:      error correction inside the current block (block mode only; ignored in window modes,
                 whose decided prefix is committed to the KV cache as it grows). "off" = a decided token
                 is final (Fast-dLLM / LLaDA). "confidence" = each step also computes logits for the
                 block's already-decided positions and puts back to mask those whose current
                 probability of their token fell below ``remask_threshold`` (lowest first, at most
                 ``remask_per_step`` per step, ``remask_budget`` per canvas) — re-decided by later
                 steps with more of the block known. Committed blocks (in the KV cache) never change.
                 Every step still decides at least one masked position, so a canvas of L positions
                 takes at most L + ``remask_budget`` steps; the last step of a ``max_steps`` budget
                 never remasks.
    """

    strategy: Literal["threshold", "topk"] = "threshold"
    threshold: float = 0.9
    tokens_per_step: int = 1
    order: Literal["confidence", "margin", "entropy"] = "confidence"
    temperature: float = 0.0
    top_p: float = 1.0
    seed: int | None = None
    block_size: int = 32
    max_steps: int | None = None  # per block; None = block length (always finishes)
    # commit a trailing run of predicted end/pad tokens at once when its mean confidence >= this
    # (None = off: pads are unmasked like any other token, one threshold decision each)
    end_run_threshold: float | None = 0.5
    window: int | Literal["block", "adaptive"] | None = None
    window_max: int | None = None  # None = the model's block size
    # single-line canvases (4-7 tokens on the CPU default): width 1 + speculation beat the adaptive
    # window's 2-position first steps (docs/PERFORMANCE.md, issue 14: bench lsp 0.73x AR with 8)
    single_line_window: int = 1
    speculate: int | None = None
    # single-line canvases verify at most this many drafts per forward. With 8, a forward widens past the
    # CPU fast path's weight-only kernel (engine.cpu.fastcpu.SMALL = 3 positions) and a wrong draft cost more
    # than the 4-7-token answer saved (0.71-0.82x AR); 2 drafts + the pending token stay within it, where a
    # forward costs about what one position does: the same outputs, faster, the slowest lines most
    # (docs/PERFORMANCE.md); 3 drafts leave the kernel and change outputs
    single_line_speculate: int = 2
    stop_at_scope: bool = True  # multi-line infill: stop once a line leaves the cursor's block
    give_up: GiveUp | None = None
    remask: Literal["off", "confidence"] = "off"
    remask_threshold: float = 0.5
    remask_per_step: int = 2
    remask_budget: int = 8  # remasks per canvas (the termination bound)


@dataclass
class CanvasSpec:
    """The masked span to fill, appended after the prompt tokens."""

    length: int  # number of mask tokens (upper bound of the output length)
    single_line: bool = False  # stop at the first newline
    stop_at_end: bool = True  # the canvas ends at the first end/pad token
    keep: int | None = None  # positions >= keep are never decoded (the response is cut there)
    # multi-line: stop before the first non-blank line after the first one that is indented less than
    # this many columns (tabs = 4), or that follows two blank lines (the cursor's block ended)
    scope_indent: int | None = None
    max_lines: int | None = None  # multi-line: stop once the output holds this many lines
    # stop at the first loop the prompt does not hold (`engine.decoding.stops.loop_cut`; finish "loop"): the gate
    # cuts a completion there and drops a rewrite, so nothing after it is ever shown
    stop_loops: bool = False
    # single line: stop once the output is this many characters long (`engine.calls.line_room`: the line
    # would outgrow the longest line of the code around it; finish "long")
    max_chars: int | None = None
    # what the output must not re-type, and where it stops being code (`engine.decoding.echo`; finish "suffix",
    # "repeat", "prose", "region"); None: no such rule
    echo: Echo | None = None
    # ``time.monotonic()`` past which a multi-line canvas stops with its finished lines (finish "budget")
    deadline: float | None = None
    # seconds of decoding a canvas may take from its first decoded token (the prefill not counted); then it
    # stops with its finished lines — none for a single line (finish "budget")
    decode_budget_s: float | None = None


@dataclass(frozen=True)
class Echo:
    """What `engine.decoding.echo.echo_cut` compares a canvas' text with (built by ``echo_for_fim`` /
    ``echo_for_edit``): stripped lines, never the whole prompt."""

    suffix_lines: tuple[str, ...] = ()  # the next non-blank lines after the canvas
    line_rest: str = ""  # a single line: the rest of the cursor's line
    # consecutive pairs of the recent non-blank lines before the cursor (a copied run re-types one)
    prefix_pairs: frozenset[tuple[str, str]] = frozenset()
    header: str = ""  # the enclosing def / class line
    line_prefix: str = ""  # the cursor's line up to the cursor (the first output line continues it)
    code: bool = True  # a code file: fences and prose are cut
    in_string: bool = False  # the canvas starts inside a triple-quoted string or block comment
    region_tail: tuple[str, ...] = ()  # a rewrite: the old region's last non-blank lines
    region_lines: int = 0  # ... and how many non-blank lines it has


class AbortSignal:
    """Set from another thread to stop a generation between denoising steps."""

    def __init__(self) -> None:
        self._event = threading.Event()

    def abort(self) -> None:
        self._event.set()

    @property
    def aborted(self) -> bool:
        return self._event.is_set()


# "skipped": the model was not asked (a next edit whose rewrite no show threshold could pass; the server's)
FinishReason = Literal["end", "length", "newline", "aborted", "scope", "loop", "long", "gave_up", "suffix",
                       "repeat", "prose", "region", "budget", "skipped"]
STOP_RULE_KINDS: tuple[FinishReason, ...] = ("scope", "loop", "long", "suffix", "repeat", "prose", "region",
                                             "budget")  # set by a stop rule (engine.decoding.stops)



@dataclass
class StepEvent:
    """One denoising step (for the optional per-step callback, Mercury's 'diffusing' stream)."""

    step: int
    block: int
    canvas: list[int]  # current canvas ids, mask id where still masked
    text: str  # canvas rendered with masks shown as the mask token text
    unmasked: int  # positions unmasked in this step
    remasked: int = 0  # decided positions put back to mask in this step (SamplerConfig.remask)


StepCallback = Callable[[StepEvent], None]


@dataclass
class GenerateResult:
    text: str
    tokens: list[int]
    confidences: list[float]  # one per output token (prob of the chosen token when unmasked)
    steps: int  # denoising steps taken (forwards over the canvas)
    forwards: int  # model forwards, prefill included
    prompt_tokens: int
    cached_tokens: int  # prompt tokens whose KV came from the prefix cache
    finish_reason: FinishReason
    timings: dict[str, float] = field(default_factory=dict)  # prefill_ms, decode_ms, total_ms
    # a rewrite (next edit): the confidences of the tokens that make the edit — those the token-level diff
    # against the editable region does not copy (`engine.calls.edit_confidences`); None: not a rewrite, or
    # an engine that cannot tell (a remote backend)
    changed: list[float] | None = None
    # the text before the first output token's: what a healed prompt token added after the text taken back
    # (`engine.decoding.heal`); ``text`` starts with it
    lead: str = ""
    lead_tokens: list[int] = field(default_factory=list)  # the healed tokens (their text: the piece + ``lead``)

    @property
    def tokens_per_forward(self) -> float:
        return len(self.tokens) / max(1, self.steps)

    @property
    def mean_confidence(self) -> float:
        return sum(self.confidences) / len(self.confidences) if self.confidences else 0.0

    @property
    def aborted(self) -> bool:
        return self.finish_reason == "aborted"


@dataclass
class GenerateRequest:
    """One entry of a batched call (Engine.generate_batch)."""

    prompt_tokens: list[int]
    canvas: CanvasSpec
    sampler: SamplerConfig | None = None
    cache_key: str | None = None
    abort: AbortSignal | None = None


@dataclass(frozen=True)
class PrefillPlan:
    """What a prompt's prefill would cost now (``EngineAPI.prefill_plan``): its tokens, how many of them no
    cached slot of the document holds, and the engine's estimate of computing those."""

    tokens: int
    uncached: int
    ms: float


@dataclass(frozen=True)
class EngineInfo:
    """What an engine says about itself (``EngineAPI.info``): shown by ``/health``, ``edit-server check`` and the
    server's status, written into benchmark reports, and read by the serving rules — the device (``on_cpu``), the
    next-edit layout and history its adapter was trained with, the gate's show thresholds measured on it.

    The fields a kind of engine does not have stay None (a remote backend has no dtype; an in-process one no
    ``remote``). Read by attribute; ``info["model"]`` / ``info.get("model")`` / ``"revision" in info`` still read
    a field (a set one: not None) for callers written against the mapping it replaced. `as_dict` is its JSON."""

    model: str = ""
    label: str = ""
    device: str = ""
    dtype: str | None = None
    attention: str | None = None  # the attention kernel path (SDPA / flash-attn)
    regime: str | None = None  # ModelArgs.attention: block_causal | bidirectional
    shifted_logits: bool | None = None
    block_size: int | None = None
    block_align: str | None = None
    prefix_cache_bytes: int | None = None
    approx_cache: bool | None = None
    params: int | None = None
    fast_cpu: str | None = None  # the int8 CPU layout's format, None: float weights
    int4_matrices: int | None = None
    int4_steps: str | None = None
    decode: str | None = None  # the default sampler's window / speculation
    format: str | None = None  # the prompt format (engine.formats)
    edit_layout: str | None = None  # the next-edit prompt order its adapter was trained on
    edit_history: int | None = None  # the diffs its next-edit prompts were trained with (None: not ours)
    show_thresholds: dict[str, Any] | None = None  # {gate kind: {"threshold": x, …}} measured on this model
    cuda_graphs: bool | None = None
    cpu_gemm: dict[str, Any] | None = None
    revision: str | None = None  # a hub model's pinned commit
    aligned: dict[str, Any] | None = None  # the KTO adapter stacked on it
    remote: str | None = None  # a remote backend: its (redacted) URL
    kind: str | None = None  # a remote backend's kind (edit-server, openai, sglang)
    warning: str | None = None  # shown with the status (a remote backend over plain http)

    @classmethod
    def of(cls, value: object) -> EngineInfo:
        """``value`` as an EngineInfo: itself, or a mapping's known keys (an engine that still gives a dict), or
        the empty info (None: no engine yet)."""
        if isinstance(value, EngineInfo):
            return value
        if isinstance(value, Mapping):
            names = {f.name for f in fields(cls)}
            return cls(**{k: v for k, v in value.items() if k in names})
        return cls()

    def as_dict(self) -> dict[str, Any]:
        """The fields as JSON-ready values, those a kind of engine lacks (None) left out."""
        return {f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) is not None}

    def __getitem__(self, key: str) -> Any:
        if key not in self._names():
            raise KeyError(key)
        return getattr(self, key)

    def get(self, key: str, default: Any = None) -> Any:
        value = getattr(self, key, None) if key in self._names() else None
        return default if value is None else value

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and key in self._names() and getattr(self, key) is not None

    @classmethod
    def _names(cls) -> frozenset[str]:
        return _INFO_FIELDS


_INFO_FIELDS = frozenset(f.name for f in fields(EngineInfo))
