"""The Engine API: load a model, then infill / rewrite / generate (single or batched).

Calls are rendered in the loaded model's own prompt format (`engine.calls`, `engine.formats`: our
native layout for the default model; in-place canvases with the suffix after them for
bidirectional models; DreamOn's variable-length span). Decoding is block diffusion. Block-causal
models (`engine.decoding.blocks`): the prompt is prefilled (reusing the longest cached token prefix of the
same ``cache_key``), then the canvas is denoised block by block, several requests in one forward
per step; blocks start at the canvas (our adapters) or tile the sequence from position 0 (SDAR,
Fast-dLLM v2, LLaDA2.0: ``block_align = "absolute"``). Bidirectional models (`engine.decoding.bidir`: Dream /
LLaDA …) run all requests batched, recomputing everything at each block start and, with
``approx_cache`` on, reusing the stale prefix+suffix KV inside a block (Fast-dLLM dual cache).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import torch
from torch import Tensor

from engine import options
from engine.api import ByComplete, Call
from engine.attention import attention_path
from engine.caches import merged as merged_cache
from engine.caches.prefix import PrefixCache, Slot, prefix_budget
from engine.calls import FormatRequest, call_request, call_result, pick_format
from engine.checkpoint import LoadedCheckpoint
from engine.config import ModelArgs
from engine.cpu import fastcpu
from engine.cpu import gemm as cpu_gemm
from engine.decoding import ahead
from engine.decoding.bidir import decode_bidirectional
from engine.decoding.blocks import OffsetDenoiser, cached_slot, decode_blocks, prefill
from engine.decoding.expand import ExpandCanvas
from engine.decoding.graphs import StepGraphs, want_graphs
from engine.decoding.heal import heal
from engine.decoding.heal import supported as heal_supported
from engine.decoding.policy import default_sampler, parse_decode, resolve, want_fast_cpu
from engine.decoding.sampler import Denoiser
from engine.decoding.steps import DecodeJob, PrefillHook, StepItem
from engine.decoding.stops import scope_rule
from engine.decoding.window import WindowDecoder
from engine.formats import FormatNotSupported
from engine.loading.ar_base import is_ar_base
from engine.model import Transformer
from engine.specs import load_checkpoint_spec, resolve_device, resolve_dtype
from engine.templates import DEFAULT_EDIT_LAYOUT, EDIT_HISTORY, FimPrompt
from engine.tokenizer import Tokenizer
from engine.types import (
    AbortSignal,
    CanvasSpec,
    EngineInfo,
    GenerateRequest,
    GenerateResult,
    PrefillPlan,
    SamplerConfig,
    StepCallback,
    StepEvent,
)

log = logging.getLogger(__name__)

PREFILL_CHUNK = 2048  # a 2K prompt in one causal forward (no mask, one pass of dequantized weights)
CPU_PREFILL_CHUNK = 1536  # on a CPU: a smaller activation peak, as fast (docs/PERFORMANCE.md)


class Engine(ByComplete):
    def __init__(self, model: Transformer, tokenizer: Tokenizer, *, name: str = "model",
                 meta: dict[str, Any] | None = None, cache_bytes: int | None = None,
                 approx_cache: bool = True, sampler: SamplerConfig | None = None,
                 fast_cpu: bool | None = None, cuda_graphs: bool | None = None) -> None:
        self.model = model.eval()
        self.args: ModelArgs = model.args
        self.tokenizer = tokenizer
        self.name = name
        self.meta = dict(meta or {})
        self.approx_cache = approx_cache
        self.lock = threading.RLock()  # one request (or reward) at a time
        self.prefill_hook: PrefillHook | None = None  # engine.decoding.steps: how a variant prefills
        self._newline_ids: frozenset[int] | None = None
        sp = tokenizer.special
        # never generated: the prompt markers and the ids the tokenizer lacks (the embedding's padding rows)
        self.suppressed_ids: tuple[int, ...] = (
            sp.fim_prefix, sp.fim_suffix, sp.fim_middle, sp.edit_history, sp.region_start, sp.region_end,
            sp.file_sep, *range(tokenizer.vocab_size, self.args.vocab_size))
        p = next(model.parameters())
        self.device, self.dtype = p.device, p.dtype
        params = self.args.param_count()
        if want_fast_cpu(fast_cpu, self.meta, self.device, self.args) and fastcpu.supported(model):
            fastcpu.convert(model)  # int8 weights, fused layers (engine/cpu/fastcpu.py)
        self.kv_dtype = fastcpu.KV_DTYPE if getattr(model, "fast_cpu", None) else self.dtype
        # int4 MLP + LM-head weights for narrow decode steps: single-line requests' (default), none or all
        # ($EDIT_SERVER_INT4, engine/cpu/fastcpu.py); the copy is kept beside the merged-model cache entry
        mode = options.env().int4_mode if getattr(model, "fast_cpu", None) else "off"
        int4 = merged_cache.attach_int4(model, self.meta.get("merged_cache")) if mode != "off" else 0
        self.int4_mode = mode if int4 else "off"
        # MKL or oneDNN for the CPU's fp32 GEMMs and attention: probed once per process (engine.cpu.gemm)
        gemm = cpu_gemm.configure() if self.device.type == "cpu" else None
        if cache_bytes is None:
            cache_bytes = prefix_budget(self.args, self.kv_dtype, self.device)
        self.cache = PrefixCache(cache_bytes)
        self.rate = ahead.PrefillRate(self.device)  # what a prefill costs here, as measured (prefill_plan)
        # captured decode steps over pooled KV arenas (engine.decoding.graphs): dense models on CUDA
        self.graphs = (StepGraphs(model, self.kv_dtype, self.device)
                       if want_graphs(cuda_graphs, self.device, self.args) else None)
        # used for requests without a sampler; its None fields are filled for those with one
        base = default_sampler(self.device, self.args.attention == "block_causal"
                               and self.args.block_align == "canvas")
        if self.meta.get("decode") and not options.env().decode:  # the checkpoint's own (AR: window 1)
            base = replace(base, **parse_decode(str(self.meta["decode"])))
        self.sampler = resolve(sampler, base)
        self.format = pick_format(tokenizer, self.meta, self.args)  # engine.formats: FIM / edit prompts
        self.info = EngineInfo(
            model=name, label=str(self.meta.get("label", name)), device=str(self.device),
            dtype=str(self.dtype).replace("torch.", ""), attention=attention_path(self.device),
            regime=self.args.attention, shifted_logits=self.args.shifted_logits,
            block_size=self.args.block_size, prefix_cache_bytes=cache_bytes,
            approx_cache=approx_cache if self.args.attention == "bidirectional" else None,
            params=params, fast_cpu=getattr(model, "fast_cpu", None), int4_matrices=int4,
            int4_steps=self.int4_mode,
            decode=f"window={self.sampler.window}, speculate={self.sampler.speculate}",
            format=self.format.name, block_align=self.args.block_align,
            edit_layout=self.meta.get("edit_layout") or DEFAULT_EDIT_LAYOUT,
            # the diffs its next-edit prompts were trained with (ours: the adapter says, else EDIT_HISTORY)
            edit_history=self.meta.get("edit_history") or (EDIT_HISTORY if self.format.name == "native" else None),
            show_thresholds=self.meta.get("show_thresholds"),  # the gate's, measured on this model
            cuda_graphs=self.graphs is not None, cpu_gemm=gemm,
            revision=str(self.meta["revision"]) if self.meta.get("revision") else None,  # a hub model's pin
        )
        log.info("engine ready: %s", self.info.as_dict())

    # ---- construction ------------------------------------------------------------------------
    @classmethod
    def load(cls, spec: str = "tiny-random", device: str = "auto", dtype: str | torch.dtype = "auto",
             **kw: Any) -> Engine:
        """``spec``: "tiny-random", "random:<preset>", "default" (the tier `engine.tiers` picks for this
        device: logged), "smollm2-bd3" (the embedded model), "qwen2.5-coder-0.5b-bd3" (our Qwen adaptation), a registry base, an HF directory or a .gguf file."""
        from engine.tiers import resolve_spec, shipped_adapter

        spec = resolve_spec(spec, resolve_device(device).type)
        adapter = shipped_adapter(spec)
        if adapter is not None:  # base + our adapter; on a CPU the int8 layout, from the merged-model cache
            from engine.default import load_default

            fast = want_fast_cpu(kw.get("fast_cpu"), {"fast_cpu": True}, resolve_device(device), None)
            ck = load_default(adapter, fast_cpu=fast)
        elif is_ar_base(spec):  # an autoregressive base (engine.loading.ar_base): int8 on a CPU unless float32 is asked for
            from engine.loading.ar_base import FAST_CPU_DEFAULT, load_ar_base

            fast = want_fast_cpu(kw.get("fast_cpu"), {"fast_cpu": FAST_CPU_DEFAULT}, resolve_device(device), None)
            ck = load_ar_base(spec, fast_cpu=fast)
        else:
            return cls.from_checkpoint(load_checkpoint_spec(spec), device=device, dtype=dtype, **kw)
        eng = cls.from_checkpoint(ck, device=device, dtype=dtype, **kw)
        if fast:  # first-call costs here rather than on the first request (same thread: one OpenMP team)
            eng.warm_up()
        return eng

    @classmethod
    def from_checkpoint(cls, ckpt: LoadedCheckpoint, device: str = "auto",
                        dtype: str | torch.dtype = "auto", **kw: Any) -> Engine:
        dev = resolve_device(device)
        dt = resolve_dtype(dtype, dev)
        args = ckpt.args
        if not args.special_tokens:
            args.special_tokens = ckpt.tokenizer.special.as_dict()
        if ckpt.meta.get("layout") == fastcpu.FORMAT:  # already int8 (engine.cpu.fastcpu): CPU only
            if dev.type != "cpu":
                raise ValueError(f"{ckpt.name}: the {fastcpu.FORMAT} layout runs on a CPU only")
            model = fastcpu.skeleton(args)
            model.load_state_dict(ckpt.state_dict, strict=True, assign=True)
            return cls(model, ckpt.tokenizer, name=ckpt.name, meta=ckpt.meta, **kw)
        model = Transformer(args, init=False)
        model.load_state_dict(ckpt.state_dict, strict=True, assign=True)
        model = model.to(device=dev, dtype=dt)
        return cls(model, ckpt.tokenizer, name=ckpt.name, meta=ckpt.meta, **kw)

    def warm_up(self) -> None:
        """One short generation through the prefill, window-step and draft paths, so the first
        request does not pay first-call costs (fresh memory, kernel set-up: ~1.5 s on a 2-core CPU)."""
        ids = self.tokenizer.encode("def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n")
        try:
            self.generate(ids, CanvasSpec(4, stop_at_end=False), SamplerConfig(window=2, speculate=2))
            heals = self.format.fim(FimPrompt("x = 1\ny = ab", "\n"), 4).heal
            if heals:  # the vocabulary's text index token healing looks up (~0.7 s for Qwen's 151K tokens)
                self.tokenizer.ids_starting_with(heals)
        except Exception:  # noqa: BLE001 - a failed warm-up only costs the first request its speed
            log.exception("engine warm-up failed")

    # ---- helpers -----------------------------------------------------------------------------
    @property
    def block_size(self) -> int:
        return self.args.block_size

    @property
    def newline_ids(self) -> frozenset[int]:
        if self._newline_ids is None:
            self._newline_ids = frozenset(i for i, t in enumerate(self.tokenizer.texts()) if "\n" in t)
        return self._newline_ids

    @torch.no_grad()
    def forward_logits(self, ids: Sequence[int] | Tensor) -> Tensor:
        """Logits (1, T, V) of a plain prompt (causal for block-causal models, else full)."""
        t = ids if isinstance(ids, Tensor) else torch.tensor([list(ids)])
        t = t.to(self.device).reshape(1, -1)
        return self.model(t, is_causal=self.args.attention == "block_causal").float()

    # ---- requests ----------------------------------------------------------------------------
    def complete(self, calls: Sequence[Call]) -> list[GenerateResult]:
        """Infill / rewrite calls as one batch (engine.api); each result as its single call gives."""
        if not calls:
            return []
        reqs: list[FormatRequest] = [call_request(self, c) for c in calls]  # FormatNotSupported: nothing ran
        results = self._run(reqs, [c.on_step for c in calls])
        return [call_result(self, c, r, q) for c, r, q in zip(calls, results, reqs, strict=True)]

    def generate(self, prompt_tokens: Sequence[int], canvas: CanvasSpec,
                 sampler: SamplerConfig | None = None, cache_key: str | None = None,
                 abort: AbortSignal | None = None, on_step: StepCallback | None = None) -> GenerateResult:
        req = GenerateRequest(list(prompt_tokens), canvas, sampler, cache_key, abort)
        return self._run([req], [on_step])[0]

    def generate_batch(self, requests: Sequence[GenerateRequest],
                       on_step: Sequence[StepCallback | None] | None = None) -> list[GenerateResult]:
        """Several requests; for block-causal models each denoising step is one batched forward."""
        if not requests:
            return []
        return self._run(list(requests), list(on_step or [None] * len(requests)))

    # ---- the step interface (engine.decoding.steps.StepRunner) ------------------------------------------
    def block(self, cfg: SamplerConfig | None) -> int:
        if self.args.attention == "block_causal":
            return self.args.block_size  # fixed by training
        return (cfg or SamplerConfig()).block_size

    def text(self, ids: list[int], single_line: bool) -> str:
        text = self.tokenizer.decode_content(ids)
        return text.split("\n", 1)[0] if single_line else text

    def emit(self, j: DecodeJob, unmasked: int) -> None:
        if j.on_step is None:
            return
        canvas = list(j.den.canvas)
        j.on_step(StepEvent(step=j.den.steps, block=j.den.block, canvas=canvas,
                            text=j.healed + self.tokenizer.decode(canvas), unmasked=unmasked,
                            remasked=len(j.den.last_remasked)))

    def step(self, items: Sequence[StepItem]) -> list[int]:
        """Unmask from hidden states of each job's current block (T, dim), with one LM-head matmul (its
        weights read once per step); ``prev`` = hidden state of the position before the block (shifted
        models). Rows: the masked positions, plus the decided ones when the sampler may remask them
        (`Denoiser.logit_rows`)."""
        rows, hs = [], []
        for j, h_block, prev in items:
            cand = j.den.logit_rows()
            rows.append(cand)
            if self.args.shifted_logits:
                assert prev is not None
                hs.extend(prev if c == 0 else h_block[c - 1] for c in cand)
            else:
                hs.extend(h_block[c] for c in cand)
        logits = self.model.logits(torch.stack(hs)[None])[0] if hs else None
        out, at = [], 0
        for (j, _, _), cand in zip(items, rows, strict=True):
            n = j.den.step(logits[at:at + len(cand)], cand) if logits is not None and cand else 0
            at += len(cand)
            self.emit(j, n)
            out.append(n)
        return out

    def forget(self, cache_key: str | None = None) -> None:
        self.cache.clear(cache_key)  # a slot in use now is put back when its request ends

    def prefill_plan(self, prompt: FimPrompt, cache_key: str) -> PrefillPlan | None:
        return ahead.plan(self, prompt, cache_key)

    def prefetch(self, prompt: FimPrompt, cache_key: str, abort: AbortSignal | None = None) -> int:
        return ahead.prefetch(self, prompt, cache_key, abort)

    def slot_key(self, j: DecodeJob) -> str | None:
        """One slot per document and prompt kind (FIM / next edit differ after the shared context)."""
        if not j.cache_key:
            return None
        return j.cache_key + ("#edit" if self.tokenizer.special.region_start in j.prompt else "#fim")

    def take_slot(self, j: DecodeJob, need: int) -> Slot:
        slot = cached_slot(self, j, need)
        return slot if self.prefill_hook is None else self.prefill_hook.take_slot(j, slot)

    # ---- internals ---------------------------------------------------------------------------
    def _job(self, req: GenerateRequest, on_step: StepCallback | None) -> DecodeJob:
        if not req.prompt_tokens:
            raise ValueError("generate needs at least one prompt token")
        cfg = resolve(req.sampler, self.sampler)
        sp = self.tokenizer.special
        after = list(req.after) if isinstance(req, FormatRequest) else []
        stops = req.stop_ids if isinstance(req, FormatRequest) else frozenset()
        expand = req.expand_id if isinstance(req, FormatRequest) else None
        heal_text = req.heal if isinstance(req, FormatRequest) else ""
        if (after or expand is not None) and self.args.attention != "bidirectional":
            raise FormatNotSupported("in-place / variable-length canvases need a bidirectional model")
        if heal_text and not heal_supported(self.args):
            raise FormatNotSupported("token healing needs a prompt that ends where the canvas starts and "
                                     "shifted logits")
        newlines = self.newline_ids if req.canvas.single_line else ()
        den: Denoiser | ExpandCanvas
        if expand is not None:
            den = ExpandCanvas(req.canvas, cfg, mask_id=sp.mask, expand_id=expand, end_ids=sp.end_ids | stops,
                               newline_ids=newlines, suppress_ids=self.suppressed_ids)
            return DecodeJob(list(req.prompt_tokens), den, req.cache_key, req.abort, on_step, after)
        scope = req.canvas.scope_indent
        kw: dict[str, Any] = dict(mask_id=sp.mask, end_ids=sp.end_ids | stops, newline_ids=newlines,
                                  block_size=self.block(cfg), suppress_ids=self.suppressed_ids,
                                  stop_rule=scope_rule(self.tokenizer.decode_content, scope, req.canvas.max_lines,
                                                       self._loop_reference(req), req.canvas.max_chars,
                                                       req.canvas.echo, req.canvas.deadline,
                                                       req.canvas.decode_budget_s))
        if self.args.attention == "block_causal" and self.args.block_align == "absolute":
            cfg = replace(cfg, window="block", speculate=0)  # blocks are fixed by position: no window mode
            den = OffsetDenoiser(req.canvas, cfg, offset=len(req.prompt_tokens) % self.block_size, **kw)
        else:
            den = Denoiser(req.canvas, cfg, **kw)
        return DecodeJob(list(req.prompt_tokens), den, req.cache_key, req.abort, on_step, after,
                         heal=heal_text)

    @torch.no_grad()
    def _run(self, reqs: Sequence[GenerateRequest], hooks: list[StepCallback | None]) -> list[GenerateResult]:
        int4 = self.int4_mode == "all" or (self.int4_mode == "line" and all(r.canvas.single_line for r in reqs))
        with self.lock, fastcpu.int4_steps(int4):
            t0 = time.perf_counter()
            jobs = [self._job(r, h) for r, h in zip(reqs, hooks, strict=True)]
            if self.args.attention == "block_causal":
                try:
                    for j in jobs:
                        self._prefill(j)
                        if j.heal:
                            heal(self, j)
                    t1 = time.perf_counter()
                    blocks = [j for j in jobs if j.den.cfg.window in (None, "block")]
                    for j in jobs:  # window mode: one at a time, the same result as alone
                        if j.den.cfg.window not in (None, "block"):
                            WindowDecoder(self, j).run()
                    if blocks:
                        decode_blocks(self, blocks)
                    t2 = time.perf_counter()
                finally:  # the prompt KV stays valid even if decoding failed
                    for j in jobs:
                        if j.slot is not None:
                            self._release(j)
                for j in jobs:
                    j.timings["decode_ms"] = (t2 - t1) * 1e3
            else:
                t1 = time.perf_counter()
                decode_bidirectional(self, jobs)  # batched: one forward per step (engine.decoding.bidir)
                for j in jobs:
                    j.timings.update(prefill_ms=0.0, decode_ms=(time.perf_counter() - t1) * 1e3)
            total = (time.perf_counter() - t0) * 1e3
            out = []
            for j in jobs:
                ids, confs = j.den.output()
                j.timings["total_ms"] = total
                text = self.text(ids, j.den.spec.single_line)
                text = text if j.den.cut_chars is None else text[:j.den.cut_chars]  # a stop rule's exact cut
                # past its time budget with no line finished (a single line: always) the answer is nothing, not
                # the healed piece of the word alone
                lead = "" if j.den.finish == "budget" and not text else j.healed
                out.append(GenerateResult(
                    text=lead + text, tokens=ids, confidences=confs,
                    steps=j.den.steps, forwards=j.forwards, prompt_tokens=len(j.prompt),
                    cached_tokens=j.cached, finish_reason=j.den.finish or "length", timings=j.timings,
                    lead=j.healed, lead_tokens=list(j.healed_ids)))
            return out

    def _loop_reference(self, req: GenerateRequest) -> str | None:
        """The text a canvas with ``stop_loops`` may repeat without stopping: the prompt's (and the
        suffix after an in-place canvas)."""
        if not req.canvas.stop_loops:
            return None
        after = list(req.after) if isinstance(req, FormatRequest) else []
        return self.tokenizer.decode_content([*req.prompt_tokens, *after])

    # -- block-causal: exact prefix cache ------------------------------------------------------
    def _prefill(self, j: DecodeJob) -> None:
        chunk = min(PREFILL_CHUNK, CPU_PREFILL_CHUNK) if self.device.type == "cpu" else PREFILL_CHUNK

        def run(job: DecodeJob) -> None:
            prefill(self, job, chunk)
            self.rate.observe(job.base - job.cached, job.timings["prefill_ms"], max(1, job.forwards))

        if self.prefill_hook is None:
            run(j)
        else:
            self.prefill_hook.prefill(j, run)

    def _release(self, j: DecodeJob) -> None:
        assert j.slot is not None and j.kv is not None
        j.kv.length = j.base
        key = self.slot_key(j)
        if key:
            self.cache.put(key, j.slot)
