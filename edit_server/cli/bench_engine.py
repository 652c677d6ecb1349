"""`edit-server bench engine`: diffusion vs autoregressive decoding and prefix-cache reuse.

On the same weights and device it measures

* decoding: block-diffusion (threshold sampler, optional ``--threshold`` sweep) vs left-to-right
  AR decoding (one token per forward over a KV cache): tokens per forward, tokens/s, wall ratio;
* prefill: cold (empty cache) vs warm (the same document after a 1-token edit at the end, exact
  prefix reuse) at several context lengths: time, tokens recomputed;
* peak memory (CUDA allocator peak, or the process' peak RSS on CPU).

Random weights (``tiny-random``, ``random:<preset>``) measure speed only: a random model is
unsure of everything, so threshold decoding unmasks ~1 token per step — the table says so.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import TYPE_CHECKING, Any

from edit_server.cli.bench_common import emit, machine, overrides_text, progress
from engine.bench import peak_memory, prefill_cold_warm, prompt_ids, sync
from engine.types import SamplerConfig

if TYPE_CHECKING:
    from engine.engine import Engine


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("engine", help="diffusion vs AR decoding, prefix-cache reuse, memory")
    p.add_argument("--model", default="random:smollm2-135m",
                   help="tiny-random, random:<preset>, random:<config.json|model dir|registry name> "
                        "(random weights at a real model's shape, e.g. "
                        "random:Dream-org/Dream-Coder-v0-Instruct-7B), default, ORG/NAME[@REV], HF dir or "
                        ".gguf (default: %(default)s)")
    p.add_argument("--device", default="auto")
    p.add_argument("--dtype", default="auto")
    p.add_argument("--prompt", type=int, default=256, help="prompt tokens for the decoding test")
    p.add_argument("--tokens", type=int, default=64, help="tokens to generate (canvas length)")
    p.add_argument("--threshold", default=str(SamplerConfig.threshold),
                   help="confidence threshold(s), comma-separated for a sweep (default: %(default)s)")
    p.add_argument("--modes", default="block,adaptive",
                   help="diffusion decode modes per threshold: block (the trained 32-position step), "
                        "adaptive (window), an int (fixed window), comma-separated (default: %(default)s)")
    p.add_argument("--contexts", default=None,
                   help="prefill context lengths, comma-separated (default: 512,2048 on CPU, "
                        "512,2048,8192,32768 on CUDA)")
    p.add_argument("--repeats", type=int, default=1, help="timed repeats per measurement (median)")
    p.add_argument("--threads", type=int, default=None, help="torch intra-op threads (CPU)")
    p.add_argument("--fast-cpu", choices=["auto", "on", "off"], default="auto",
                   help="int8 fused CPU layers (engine.cpu.fastcpu); auto: as the model's loader says")
    p.add_argument("--cuda-graphs", choices=["auto", "on", "off"], default="auto",
                   help="capture the decode step as a CUDA graph (engine.decoding.graphs); auto: on for dense models on CUDA")
    p.add_argument("--batch", default=None,
                   help="batch sizes, comma-separated: batched vs one-by-one in-place decoding (edit_server.cli.bench_batch)")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(func=run)


def ar_decode(eng: Engine, prompt: list[int], n: int) -> dict[str, float]:
    """Greedy left-to-right decoding, one token per forward over a KV cache (the AR baseline)."""
    import torch

    from engine.caches.prefix import KVCache

    m, dev = eng.model, eng.device
    with torch.no_grad():
        kv = KVCache.for_model(eng.args, 1, len(prompt) + n, getattr(eng, "kv_dtype", eng.dtype), dev)
        t0 = time.perf_counter()
        logits = m(torch.tensor([prompt], device=dev), cache=kv, is_causal=True,
                   logits_slice=slice(-1, None))
        kv.length = len(prompt)
        sync(dev)
        t1 = time.perf_counter()
        out = []
        for _ in range(n):
            tok = int(logits[0, -1].argmax())
            out.append(tok)
            logits = m(torch.tensor([[tok]], device=dev), cache=kv, offset=kv.length)
            kv.length += 1
        sync(dev)
        t2 = time.perf_counter()
    return {"prefill_ms": (t1 - t0) * 1e3, "decode_ms": (t2 - t1) * 1e3, "tokens": n, "forwards": n}


def _median(xs: list[float]) -> float:
    return float(statistics.median(xs))


def bench_decoding(eng: Engine, n_prompt: int, n_tokens: int, thresholds: list[float],
                   repeats: int, modes: tuple[str | int, ...] = ("block",)) -> dict[str, Any]:
    from engine.types import CanvasSpec

    prompt = prompt_ids(eng, n_prompt)
    spec = CanvasSpec(n_tokens, stop_at_end=False)  # fixed length: same work as AR
    progress(f"AR decoding: {n_tokens} tokens after {n_prompt}")
    ar_decode(eng, prompt, 4)  # warm-up
    ar = [ar_decode(eng, prompt, n_tokens) for _ in range(repeats)]
    ar_ms = _median([a["decode_ms"] for a in ar])
    rows = []
    eng.generate(prompt, CanvasSpec(eng.block_size), SamplerConfig(threshold=0.0))  # warm-up
    for tau, mode in [(t, m) for t in thresholds for m in modes]:
      cfg = SamplerConfig(threshold=tau, window=mode)  # type: ignore[arg-type]
      progress(f"diffusion decoding, threshold {tau}, {mode}")
      runs = [eng.generate(prompt, spec, cfg) for _ in range(repeats)]
      r = runs[0]
      dec_ms = _median([x.timings["decode_ms"] for x in runs])
      rows.append({
          "threshold": tau, "mode": str(mode), "tokens": len(r.tokens), "steps": r.steps,
          "forwards": r.forwards, "positions": int(r.timings.get("decode_positions", 0)),
          "tokens_per_step": round(len(r.tokens) / max(1, r.steps), 3),
          "mean_confidence": round(r.mean_confidence, 4),
          "decode_ms": round(dec_ms, 2), "tokens_per_s": round(len(r.tokens) / dec_ms * 1e3, 1),
          "speedup_vs_ar": round(ar_ms / dec_ms, 3),
      })
    return {"prompt_tokens": n_prompt, "ar": {"tokens": n_tokens, "tokens_per_forward": 1.0,
                                              "decode_ms": round(ar_ms, 2),
                                              "tokens_per_s": round(n_tokens / ar_ms * 1e3, 1)},
            "diffusion": rows}


def run(args: argparse.Namespace) -> int:
    import torch

    from engine.engine import Engine

    if args.threads:
        torch.set_num_threads(args.threads)
    onoff = {"on": True, "off": False}
    fast = onoff.get(getattr(args, "fast_cpu", "auto"))
    graphs = onoff.get(getattr(args, "cuda_graphs", "auto"))
    eng = Engine.load(args.model, device=args.device, dtype=args.dtype, fast_cpu=fast, cuda_graphs=graphs)
    dev = eng.device
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats(dev)
    if args.contexts:
        contexts = [int(x) for x in args.contexts.split(",") if x.strip()]
    else:
        contexts = [512, 2048] if dev.type == "cpu" else [512, 2048, 8192, 32768]
    thresholds = [float(x) for x in str(args.threshold).split(",") if x.strip()]
    modes = tuple(int(m) if m.strip().isdigit() else m.strip() for m in args.modes.split(",") if m.strip())
    t0 = time.perf_counter()
    report = {
        "model": eng.info.as_dict(), "machine": machine(dev),
        "decoding": bench_decoding(eng, args.prompt, args.tokens, thresholds, args.repeats, modes),
        "prefill": prefill_cold_warm(eng, contexts, args.repeats, progress),
    }
    if getattr(args, "batch", None):
        from edit_server.cli.bench_batch import bench_batch

        sizes = [int(x) for x in args.batch.split(",") if x.strip()]
        report["batch"] = bench_batch(eng, sizes, args.prompt, args.tokens)
    report["memory"] = peak_memory(dev)
    if eng.graphs is not None:
        report["cuda_graphs"] = eng.graphs.info()
    report["wall_s"] = round(time.perf_counter() - t0, 1)
    return emit(report, args.json, format_report)


def format_report(r: dict[str, Any]) -> str:
    m, mach, dec = r["model"], r["machine"], r["decoding"]
    lines = [f"model {m['model']} ({m['label']}), {m['params'] / 1e6:.1f} M params, {m['dtype']}, "
             f"attention {m['attention']}, block {m['block_size']}"
             + (f", {m['fast_cpu']}" if m.get("fast_cpu") else "")
             + (", CUDA graphs" if m.get("cuda_graphs") else ""),
             f"machine {mach.get('gpu') or mach.get('cpu')} / {mach['cpu_count']} cores, "
             f"torch {mach['torch']} ({mach['torch_threads']} threads){overrides_text(mach)}", "",
             f"decoding {dec['ar']['tokens']} tokens after a {dec['prompt_tokens']}-token prompt",
             f"{'mode':<32}{'tok/fwd':>9}{'steps':>7}{'positions':>10}{'ms':>10}{'tok/s':>9}{'vs AR':>8}",
             f"{'autoregressive':<32}{1.0:>9.2f}{dec['ar']['tokens']:>7}{dec['ar']['tokens']:>10}"
             f"{dec['ar']['decode_ms']:>10.1f}{dec['ar']['tokens_per_s']:>9.1f}{1.0:>8.2f}"]
    for d in dec["diffusion"]:
        name = f"diffusion tau={d['threshold']} {d.get('mode', '')}"
        lines.append(f"{name:<32}{d['tokens_per_step']:>9.2f}{d['steps']:>7}{d.get('positions', 0):>10}"
                     f"{d['decode_ms']:>10.1f}{d['tokens_per_s']:>9.1f}{d['speedup_vs_ar']:>8.2f}")
    if "random" in str(m["label"]):
        lines.append("(random weights: confidences are near-uniform, so threshold decoding "
                     "unmasks ~1 token per step; speed only)")
    lines += ["", "prefill: cold vs warm (1-token edit at the end, exact prefix reuse)",
              f"{'context':>8}{'cold ms':>11}{'warm ms':>10}{'recomputed':>12}{'speedup':>9}"]
    for p in r["prefill"]:
        lines.append(f"{p['context']:>8}{p['cold_ms']:>11.1f}{p['warm_ms']:>10.1f}"
                     f"{p['recomputed']:>6} ({p['recomputed_frac']:.2%}){p['speedup']:>7.1f}x")
    if r.get("batch"):
        from edit_server.cli.bench_batch import format_batch

        lines += format_batch(r["batch"], dec["prompt_tokens"])
    mem = r["memory"]
    lines += ["", "peak memory: " + ", ".join(f"{k} {v}" for k, v in mem.items()),
              f"wall {r['wall_s']} s", ""]
    return "\n".join(lines)
