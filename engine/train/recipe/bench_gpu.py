"""The engine on a GPU inside a window: ``python -m engine.train.recipe.bench_gpu engine|latency`` (one JSON file each).

``engine`` (while the base uploads, random weights: no checkpoint needed): per model shape — the default's
(``smollm2-135m``) and a 7B dLLM's (``Dream-org/Dream-Coder-v0-Instruct-7B``) — diffusion vs AR decoding of
the same weights after 2K and 32K-token prompts, with CUDA graphs on and off, and the prefill cold vs warm
(the measurements of `edit-server bench engine`, which lives above the engine), inside ``--budget-s`` (what
does not fit is listed as skipped). Weights
are made on the meta device and materialised on the target device in the target dtype, so a 7B model takes
its bf16 bytes on the GPU (15 GB) and nothing on the host.

``latency`` (after training, the trained default): single-line completions and next edits typed at
positions spread over a real file (this package's own source), p50 / p95 ms and tokens per forward.

Both write their JSON after every measurement, so a command stopped at its limit still leaves what it
measured. Every path runs on a CPU with tiny shapes (tests/test_bench_gpu.py).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
import statistics
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from engine.bench import peak_memory, prefill_cold_warm, prompt_ids, sync
from engine.tiers import EMBEDDED
from engine.train.recipe.workdir import read_json

if TYPE_CHECKING:
    from engine.engine import Engine

SHAPES = {"default": "smollm2-135m", "7b": "Dream-org/Dream-Coder-v0-Instruct-7B", "tiny": "tiny"}
log = logging.getLogger(__name__)


def random_engine(shape: str, device: str = "auto", dtype: str = "auto", *, seed: int = 0,
                  cuda_graphs: bool | None = None, fast_cpu: bool | None = None, model: Any = None) -> Engine:
    """An `Engine` over seeded random weights of ``shape`` (a preset or registry name), built on the meta
    device and materialised once, on ``device`` in ``dtype`` (no host copy, no fp32 detour). ``model``: reuse
    these weights (another engine over the same model, e.g. CUDA graphs off)."""
    import torch

    from engine.engine import Engine
    from engine.model import Transformer
    from engine.specs import _random_args, resolve_device, resolve_dtype
    from engine.tokenizer import Tokenizer

    tok = Tokenizer.byte_level()
    args, label = _random_args(shape, tok)
    if model is None:
        dev = resolve_device(device)
        dt = resolve_dtype(dtype, dev)
        with torch.device("meta"):
            model = Transformer(args, init=False)
        model = model.to(dtype=dt).to_empty(device=dev)
        with torch.no_grad():
            for _, buf in model.named_buffers():
                buf.zero_()
        model.init_random(seed)
    return Engine(model, tok, name="tiny-random" if shape == "tiny" else f"random:{shape}", cuda_graphs=cuda_graphs,
                  fast_cpu=fast_cpu, meta={"label": f"random weights (benchmarks), {label}", "seed": seed})


def model_bytes(shape: str, dtype_bytes: int = 2) -> int:
    """Bytes of ``shape``'s weights (built on the meta device: nothing is allocated)."""
    import torch

    from engine.model import Transformer
    from engine.specs import _random_args
    from engine.tokenizer import Tokenizer

    args, _ = _random_args(shape, Tokenizer.byte_level())
    with torch.device("meta"):
        m = Transformer(args, init=False)
    return sum(p.numel() for p in m.parameters()) * dtype_bytes


# ---- measurements (the same as `edit-server bench engine`'s, which lives above the engine) ----------------


def machine(device: Any) -> dict[str, Any]:
    import os
    import platform

    import torch

    info: dict[str, Any] = {"device": str(device), "torch": torch.__version__, "python": platform.python_version(),
                            "cpu_count": os.cpu_count(), "torch_threads": torch.get_num_threads(),
                            "cpu": platform.processor()}
    if device.type == "cuda":
        info["gpu"] = torch.cuda.get_device_name(device)
    return info


def ar_ms(eng: Engine, prompt: list[int], n: int) -> float:
    """Greedy left-to-right decoding of ``n`` tokens, one per forward over a KV cache: decode ms."""
    import torch

    from engine.caches.prefix import KVCache

    m, dev = eng.model, eng.device
    with torch.no_grad():
        kv = KVCache.for_model(eng.args, 1, len(prompt) + n, getattr(eng, "kv_dtype", eng.dtype), dev)
        logits = m(torch.tensor([prompt], device=dev), cache=kv, is_causal=True, logits_slice=slice(-1, None))
        kv.length = len(prompt)
        sync(dev)
        t = time.perf_counter()
        for _ in range(n):
            logits = m(torch.tensor([[int(logits[0, -1].argmax())]], device=dev), cache=kv, offset=kv.length)
            kv.length += 1
        sync(dev)
    return (time.perf_counter() - t) * 1e3


def bench_decoding(eng: Engine, n_prompt: int, n_tokens: int, threshold: float) -> dict[str, Any]:
    """AR vs diffusion (threshold sampler, block mode) decoding of ``n_tokens`` after ``n_prompt`` tokens, and
    the served decoding, width 1 (its steps captured where the engine has graphs)."""
    from engine.types import CanvasSpec, SamplerConfig

    prompt = prompt_ids(eng, n_prompt)
    ar_ms(eng, prompt, 2)  # warm-up
    ar = ar_ms(eng, prompt, n_tokens)
    eng.generate(prompt, CanvasSpec(eng.block_size), SamplerConfig(threshold=0.0))  # warm-up
    r = eng.generate(prompt, CanvasSpec(n_tokens, stop_at_end=False), SamplerConfig(threshold=threshold,
                                                                                    window="block"))
    dec = r.timings["decode_ms"]
    w1cfg = SamplerConfig(threshold=threshold, window=1)
    eng.generate(prompt, CanvasSpec(eng.block_size, stop_at_end=False), w1cfg)  # warm-up (captures its step)
    w1 = eng.generate(prompt, CanvasSpec(n_tokens, stop_at_end=False), w1cfg)
    w1ms = w1.timings["decode_ms"]
    return {"ar": {"tokens": n_tokens, "decode_ms": round(ar, 2), "tokens_per_s": round(n_tokens / ar * 1e3, 1)},
            "width1": {"tokens": len(w1.tokens), "forwards": w1.forwards, "decode_ms": round(w1ms, 2),
                       "drafted": w1.timings.get("decode_drafted", 0.0),  # prompt-lookup drafts, as served
                       "ms_per_forward": round(w1ms / max(1.0, w1.timings.get("decode_forwards") or w1.forwards), 3)},
            "diffusion": {"threshold": threshold, "tokens": len(r.tokens), "steps": r.steps, "forwards": r.forwards,
                          "tokens_per_step": round(len(r.tokens) / max(1, r.steps), 3), "decode_ms": round(dec, 2),
                          "tokens_per_s": round(len(r.tokens) / dec * 1e3, 1), "speedup_vs_ar": round(ar / dec, 3)}}


def profile_decoding(eng: Engine, n_prompt: int, n_tokens: int) -> dict[str, Any]:
    """Where each decoded token's time goes (`engine.bench.profile`): AR over a KV cache, and diffusion in
    the trained block and at width 1 (the served decoding), ``n_tokens`` each after ``n_prompt`` tokens."""
    from engine.bench.profile import profile_calls
    from engine.types import CanvasSpec, SamplerConfig

    prompt, kind = prompt_ids(eng, n_prompt), eng.device.type
    ar_ms(eng, prompt, 2)  # warm-up (a first call's allocations are not a step's cost)
    out: dict[str, Any] = {"prompt": n_prompt, "ar": profile_calls(lambda: ar_ms(eng, prompt, n_tokens), n_tokens,
                                                                  device_type=kind)}
    for name, window in (("block", "block"), ("width1", 1)):
        cfg = SamplerConfig(threshold=0.9, window=window)
        spec = CanvasSpec(n_tokens, stop_at_end=False)
        eng.generate(prompt, CanvasSpec(eng.block_size, stop_at_end=False), cfg)  # warm-up
        got: list[Any] = []
        out[name] = profile_calls(lambda got=got, spec=spec, cfg=cfg: got.append(eng.generate(prompt, spec, cfg)),
                                  n_tokens, device_type=kind)
        out[name]["forwards"] = got[0].forwards
        eng.cache.clear()
    return out


BUSY_PHASES = ("starting", "corpus")  # a window job's phases that keep every host core busy


def job_phase(path: Path | None) -> str | None:
    """The window job's phase (its ``phase.json``), None without one."""
    d = read_json(path) if path is not None else None
    return str(d.get("phase")) if isinstance(d, dict) else None


class Report:
    """The JSON report, rewritten after every measurement. ``phase_file``: the window job's ``phase.json``, whose
    phase each row records."""

    def __init__(self, out: Path | None, head: dict[str, Any], phase_file: Path | None = None) -> None:
        self.out, self.data, self.t0 = out, {**head, "rows": [], "skipped": []}, time.perf_counter()
        self.phase_file = phase_file

    def elapsed(self) -> float:
        return time.perf_counter() - self.t0

    def add(self, row: dict[str, Any]) -> None:
        # the host's load beside each row: a window's bench shares the machine with the corpus build and
        # training, and host-bound decoding (kernel launches) slows with every busy core
        extra = {"job_phase": job_phase(self.phase_file)} if self.phase_file is not None else {}
        self.data["rows"].append({**row, "at_s": round(self.elapsed(), 1), "load_1m": round(os.getloadavg()[0], 2),
                                  **extra})
        self.flush()

    def wait_quiet(self, max_s: float) -> None:
        """Wait (at most ``max_s``, on the bench's own clock) while the job builds its corpus on every core: rows
        measured then run several times slower than those after it."""
        t = time.perf_counter()
        while job_phase(self.phase_file) in BUSY_PHASES and time.perf_counter() - t < max_s:
            time.sleep(0.5)
        self.data["waited_s"] = round(time.perf_counter() - t, 1)
        self.flush()

    def skip(self, what: str) -> None:
        self.data["skipped"].append(what)
        self.flush()

    def flush(self) -> None:
        self.data["wall_s"] = round(self.elapsed(), 1)
        if self.out is not None:
            self.out.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.out.with_name(self.out.name + ".tmp")
            tmp.write_text(json.dumps(self.data, indent=1))
            tmp.replace(self.out)


def run_engine(a: argparse.Namespace) -> dict[str, Any]:
    import torch

    from engine.specs import resolve_device

    dev = resolve_device(a.device)
    rep = Report(a.out, {"kind": "bench-gpu-engine", "machine": machine(dev), "budget_s": a.budget_s}, a.job_phase)
    if a.job_phase is not None:
        rep.wait_quiet(a.quiet_wait_s)
    prompts = [int(x) for x in a.prompts.split(",") if x]
    graphs = [{"on": True, "off": False}[g] for g in a.graphs.split(",") if g]
    for key in [s for s in a.shapes.split(",") if s]:
        shape = SHAPES.get(key, key)
        if rep.elapsed() > a.budget_s * 0.85:
            rep.skip(f"{shape}: out of budget")
            continue
        t = time.perf_counter()
        if dev.type == "cuda":
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats(dev)
        try:
            first = random_engine(shape, a.device, a.dtype, cuda_graphs=graphs[0])
        except (RuntimeError, MemoryError) as e:  # torch.OutOfMemoryError is a RuntimeError
            rep.skip(f"{shape}: {type(e).__name__}: {str(e)[:200]}")
            continue
        rep.add({"shape": shape, "what": "load", "ms": round((time.perf_counter() - t) * 1e3, 1),
                 "params": first.info.params, "dtype": first.info.dtype, **peak_memory(dev)})
        model = first.model
        for g in graphs:
            eng = first if g == graphs[0] else random_engine(shape, cuda_graphs=g, model=model)
            for n in prompts:
                if rep.elapsed() > a.budget_s:
                    rep.skip(f"{shape} graphs={g} prompt={n}: out of budget")
                    continue
                d = bench_decoding(eng, n, a.tokens, a.threshold)
                rep.add({"shape": shape, "what": "decode", "cuda_graphs": eng.graphs is not None,
                         "graphs_asked": g, "prompt": n, **d,
                         **({"graphs": eng.graphs.info()} if eng.graphs is not None else {})})
                eng.cache.clear()
            if g == graphs[0]:
                ctx = [n for n in prompts if rep.elapsed() < a.budget_s]
                if ctx:
                    rep.add({"shape": shape, "what": "prefill", "rows": prefill_cold_warm(eng, ctx)})
                eng.cache.clear()
        if a.profile > 0 and prompts and rep.elapsed() < a.budget_s:
            # eager steps (the launches graphs remove): CUPTI with captured graphs replayed after the profiler
            # stopped was an illegal memory access on the H200 (pytorch#75504: the rows after it are lost)
            prof = eng if eng.graphs is None else random_engine(shape, cuda_graphs=False, model=model)
            try:
                rep.add({"shape": shape, "what": "profile", "cuda_graphs": False,
                         **profile_decoding(prof, prompts[0], a.profile)})
            except RuntimeError as e:  # the rows measured so far stay; the next shape still runs
                rep.skip(f"{shape} profile: {type(e).__name__}: {str(e)[:200]}")
            del prof
        rep.add({"shape": shape, "what": "memory", **peak_memory(dev)})
        del first, eng, model
        if dev.type == "cuda":
            torch.cuda.empty_cache()
    return rep.data


def _digest(tokens: list[int]) -> str:
    return hashlib.sha256(json.dumps(tokens).encode()).hexdigest()[:16]


def run_latency(a: argparse.Namespace) -> dict[str, Any]:
    from engine.engine import Engine
    from engine.templates import EditPrompt, FimPrompt
    from engine.textdiff import unified_diff

    rep = Report(a.out, {"kind": "bench-gpu-latency", "model": a.model, "loading": True, "budget_s": a.budget_s})
    rep.flush()  # a command stopped while the model loads still says so
    eng = Engine.load(a.model, device=a.device, dtype=a.dtype)
    rep.data.update(model=eng.info.as_dict(), machine=machine(eng.device), loading=False, load_ms=round(rep.elapsed() * 1e3, 1))
    path = Path(a.file) if a.file else Path(__file__).resolve().parents[2] / "templates.py"
    text = path.read_text()
    lines = text.splitlines(keepends=True)
    starts = [0]
    for ln in lines:
        starts.append(starts[-1] + len(ln))
    code = [i for i, ln in enumerate(lines) if len(ln.strip()) > 8 and 2 <= i < len(lines) - 4]
    picks = [code[k * len(code) // a.positions] for k in range(a.positions)] if code else []
    eng.infill(FimPrompt(text[:starts[2]], text[starts[2]:], path=path.name), max_tokens=16, single_line=True)
    graphs = eng.graphs  # captured decode steps (CUDA): on and off in turn at each position, the same weights
    modes = [g for g in a.graphs.split(",") if g and (g == "off" or graphs is not None)] or ["off"]

    def one(mode: str, kind: str, n: int, i: int) -> Any:
        ln = lines[i]
        if kind == "single-line":
            cut = starts[i] + len(ln) - len(ln.lstrip()) + max(1, len(ln.strip()) // 2)
            return eng.infill(FimPrompt(text[:cut], text[cut:], path=path.name), max_tokens=64,
                              single_line=True, cache_key=f"lat:{mode}:{n}")
        # the user just renamed a word on this line: rewrite the lines around it
        word = max(ln.split(), key=len)
        new_ln = ln.replace(word, word + "_x", 1)
        a0, b0 = starts[max(0, i - 2)], starts[min(len(lines), i + 4)]
        region = text[a0:starts[i]] + new_ln + text[starts[i + 1]:b0]
        hist = (unified_diff(path.name, ln, new_ln, first_line=i),)
        return eng.rewrite(EditPrompt(text[:a0], region, text[b0:], starts[i] - a0 + len(new_ln) - 1,
                                      path=path.name, history=hist), cache_key=f"edit:{mode}:{n}")

    for kind in ("single-line", "next-edit"):
        for n, i in enumerate(picks):
            for mode in modes:  # paired: whatever the budget cuts, both modes have the same positions
                if rep.elapsed() > a.budget_s:
                    rep.skip(f"graphs {mode} {kind} position {n}: out of budget")
                    continue
                eng.graphs = graphs if mode == "on" else None
                t = time.perf_counter()
                r = one(mode, kind, n, i)
                rep.add({"what": kind, "cuda_graphs": mode, "line": i + 1,
                         "ms": round((time.perf_counter() - t) * 1e3, 1), "tokens": len(r.tokens),
                         "forwards": r.forwards, "finish": r.finish_reason, "out": _digest(r.tokens)})
    eng.graphs = graphs
    rows = rep.data["rows"]
    for mode in modes:
        for kind in ("single-line", "next-edit"):
            mine = [r for r in rows if r["what"] == kind and r["cuda_graphs"] == mode]
            ms = sorted(r["ms"] for r in mine)
            if ms:  # the first mode keeps the plain key that reports before the on / off pairing used
                rep.data[kind if mode == modes[0] else f"{kind} (graphs {mode})"] = {
                    "cuda_graphs": mode, "n": len(ms), "p50_ms": round(statistics.median(ms), 1),
                    "p95_ms": ms[min(len(ms) - 1, int(0.95 * len(ms)))],
                    "tokens_per_forward": round(statistics.mean(r["tokens"] / max(1, r["forwards"])
                                                                for r in mine), 3)}
    if graphs is not None:
        rep.data["graphs"] = graphs.info()
    if len(modes) > 1:  # captured steps must answer what eager ones answer (bf16 may flip a rare token)
        by = {(r["what"], r["line"], r["cuda_graphs"]): r["out"] for r in rows}
        pairs = [(v, by[(w, ln, modes[1])]) for (w, ln, m), v in by.items()
                 if m == modes[0] and (w, ln, modes[1]) in by]
        rep.data["same_output"] = {"pairs": len(pairs), "same": sum(a == b for a, b in pairs)}
    rep.flush()
    return rep.data


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m engine.train.recipe.bench_gpu", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="what", required=True)
    e = sub.add_parser("engine", help="random weights: diffusion vs AR, 2K/32K prompts, CUDA graphs on/off")
    e.add_argument("--shapes", default="default,7b", help=f"comma-separated: {', '.join(SHAPES)} or a preset")
    e.add_argument("--prompts", default="2048,32768")
    e.add_argument("--tokens", type=int, default=64)
    e.add_argument("--threshold", type=float, default=0.9)
    # off first: on an H200 AR over the same weights ran several times slower in the first engine's rows
    # (graphs on) than in the second's, the host idle in the last; off first tells order from graphs
    e.add_argument("--graphs", default="off,on")
    e.add_argument("--profile", type=int, default=16,
                   help="tokens decoded under torch.profiler per shape (AR, block, width 1; 0: none)")
    e.add_argument("--job-phase", type=Path, help="the window job's phase.json: wait out its corpus build, record "
                                                  "its phase beside each row")
    e.add_argument("--quiet-wait-s", type=float, default=40.0,
                   help="the longest wait for the corpus build (counted in --budget-s)")
    for sp in (e, lat := sub.add_parser("latency", help="the trained default: single-line and next-edit latency")):
        sp.add_argument("--device", default="auto")
        sp.add_argument("--dtype", default="auto")
        sp.add_argument("--budget-s", type=float, default=90.0)
        sp.add_argument("--out", type=Path)
    lat.add_argument("--model", default=EMBEDDED)
    lat.add_argument("--file", help="the file typed in (default: engine/templates.py)")
    lat.add_argument("--positions", type=int, default=12)
    lat.add_argument("--graphs", default="on,off",
                     help="CUDA graphs on / off, timed in turn at each position over the same weights "
                          "(CPU: off)")
    a = p.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    # CUPTI re-initialised lazily after a profiler session breaks CUDA graph replays (pytorch#75504, #107744)
    os.environ.setdefault("DISABLE_CUPTI_LAZY_REINIT", "1")
    data = run_engine(a) if a.what == "engine" else run_latency(a)
    json.dump({k: v for k, v in data.items() if k != "rows"}, sys.stdout)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
