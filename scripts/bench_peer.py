#!/usr/bin/env python
"""Our engine vs llama.cpp on the same HumanEval-infilling prompts (the peer row of docs/QUALITY.md).

    python scripts/bench_peer.py --model qwen2.5-coder-0.5b --split single-line --limit 100 \\
        --out runs/peer/q05-single [--threads 2] [--cut llama-vim]

1. ours: ``EDIT_SERVER_FASTCPU=0 edit-server eval humaneval-infill --model M --device cpu`` (float32: the
   exact weights, not the int8 layout served on a CPU) into ``OUT/ours`` (resumed: finished cases are not run
   again);
2. the peer: llama-cpp-python (``pip install llama-cpp-python``, the optional ``peer`` extra; it builds
   llama.cpp from source) on the same GGUF file, fed the *same token ids* our format renders (Qwen's
   ``<|fim_prefix|>…<|fim_suffix|>…<|fim_middle|>``), greedy (temperature 0, no penalties), stopping at
   its end-of-generation tokens, at most the split's max tokens; single-line: text up to the first
   newline, as ours. Scored by the same sandbox into ``OUT/peer``;
3. ``OUT/summary.json`` / ``summary.md``: pass@1 of both, the share of cases whose middles are
   identical, latency p50 / p95 per case (cold prompt; the machine is shared unless said otherwise).

``--cut llama-vim`` (multi-line) also scores both after llama-server's cut for llama.vim: a middle ends
before its first line that re-types the suffix's first line or is indented less than the cursor's line.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def llama_vim_cut(middle: str, prefix: str, suffix: str) -> str:
    """llama-server's ``/infill`` post-processing for llama.vim (approximation): keep lines until one
    re-types the suffix's first non-blank line or dedents below the cursor line's indentation."""
    cur = prefix.rsplit("\n", 1)[-1]
    base = len(cur.expandtabs(4)) - len(cur.expandtabs(4).lstrip())
    nxt = next((ln.strip() for ln in suffix.split("\n") if ln.strip()), None)
    lines = middle.split("\n")
    out = [lines[0]]
    for ln in lines[1:]:
        if ln.strip() and (ln.strip() == nxt or len(ln.expandtabs(4)) - len(ln.expandtabs(4).lstrip()) < base):
            break
        out.append(ln)
    return "\n".join(out)


def _records(out: Path) -> dict[str, dict[str, Any]]:
    path = out / "results.jsonl"
    recs = {}
    if path.is_file():
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                r = json.loads(line)
                recs[r["id"]] = r
    return recs


def run_ours(a: argparse.Namespace) -> dict[str, dict[str, Any]]:
    import os

    from edit_server.cli import main

    os.environ.setdefault("EDIT_SERVER_FASTCPU", "0")  # the reference: float32, the file's exact weights

    argv = ["eval", "humaneval-infill", "--model", a.model, "--device", "cpu", "--split", a.split,
            "--out", str(a.out / "ours"), "--no-progress", "--data", str(a.data)]
    if a.limit:
        argv += ["--limit", str(a.limit)]
    if main(argv) != 0:
        raise SystemExit("our eval failed")
    return _records(a.out / "ours")


def run_peer(a: argparse.Namespace, tasks: list[Any]) -> dict[str, dict[str, Any]]:
    try:
        import llama_cpp
        import llama_cpp.llama as llama_mod
        from llama_cpp import Llama
    except ImportError:
        raise SystemExit("llama-cpp-python is not installed: pip install llama-cpp-python (builds llama.cpp)") from None
    if a.no_extra_bufts:  # no repacked / AMX weight buffers: their AMX kernels fault in this VM (GPF, measured)
        default_params = llama_cpp.llama_model_default_params

        def params():  # type: ignore[no-untyped-def]
            p = default_params()
            p.use_extra_bufts = False
            return p

        llama_mod.llama_cpp.llama_model_default_params = params
    from gguf import GGUFReader

    from engine.formats import for_model
    from engine.loading.base import fetch_parted
    from engine.loading.gguf_file import gguf_tokenizer
    from engine.templates import FimPrompt
    from evals.datasets import MAX_TOKENS
    from evals.humaneval import Scorer, fix_middle
    from evals.sandbox import Limits
    from evals.store import ResultStore

    path = fetch_parted(a.model)
    tok = gguf_tokenizer(GGUFReader(str(path)), path, reuse_unused=True)
    fmt = for_model(tok, {"registry": a.model})
    max_tokens = MAX_TOKENS[a.split]
    store = ResultStore(a.out / "peer", {"kind": "humaneval-infill", "split": a.split, "runner": "llama.cpp",
                                         "model": a.model, "threads": a.threads, "max_tokens": max_tokens})
    llm = Llama(model_path=str(path), n_ctx=a.n_ctx, n_threads=a.threads, n_threads_batch=a.threads,
                n_batch=512, verbose=False)
    scorer = Scorer(store, Limits(timeout_s=10.0, cpu_s=11), 1)
    try:
        for t in tasks:
            if store.done(t.task_id):
                continue
            lay = fmt.fim(FimPrompt(t.prompt, t.suffix, path=f"{t.entry_point}.py"), max_tokens)
            ids = lay.before + tok.encode(lay.heal)  # llama.cpp does not heal: the piece as typed
            llm.reset()  # a cold prompt per case, as ours (each case has its own cache key)
            t0 = time.perf_counter()
            out = llm.create_completion(prompt=ids, max_tokens=max_tokens, temperature=0.0, top_k=1, top_p=1.0,
                                        min_p=0.0, repeat_penalty=1.0, stop=["\n"] if a.split == "single-line" else None)
            ms = (time.perf_counter() - t0) * 1000
            text = out["choices"][0]["text"]
            if a.split == "single-line":
                text = text.split("\n", 1)[0]
            scorer.submit(t, {"id": t.task_id, "middle": fix_middle(a.split, text, t.prompt), "latency_ms": ms,
                              "finish_reason": out["choices"][0]["finish_reason"]})
    finally:
        scorer.close()
    return _records(a.out / "peer")


def _rescore_cut(tasks: list[Any], recs: dict[str, dict[str, Any]]) -> float:
    from evals.humaneval import score
    from evals.sandbox import Limits

    passed = 0
    for t in tasks:
        mid = llama_vim_cut(recs[t.task_id]["middle"], t.prompt, t.suffix)
        passed += bool(score(t, mid if mid.endswith("\n") else mid + "\n", Limits(timeout_s=10.0, cpu_s=11))["passed"])
    return passed / len(tasks)


def _lat(recs: list[dict[str, Any]]) -> dict[str, float]:
    ms = sorted(r["latency_ms"] for r in recs if "latency_ms" in r)
    if not ms:
        return {}
    return {"p50_ms": statistics.median(ms), "p95_ms": ms[min(len(ms) - 1, int(0.95 * len(ms)))]}


def main(argv: list[str] | None = None) -> int:
    from evals.datasets import default_data_dir, load_humaneval

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="qwen2.5-coder-0.5b")
    p.add_argument("--split", default="single-line", choices=["single-line", "multi-line"])
    p.add_argument("--limit", type=int, default=100)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--n-ctx", type=int, default=4096)
    p.add_argument("--data", type=Path, default=default_data_dir())
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--cut", choices=["none", "llama-vim"], default="none")
    p.add_argument("--extra-bufts", dest="no_extra_bufts", action="store_false",
                   help="let llama.cpp repack weights into its extra (AMX / repack) buffers; off by default: "
                        "on this project's VM (Intel Xeon with AMX) they crash with a protection fault")
    p.add_argument("--skip-ours", action="store_true", help="only the peer (OUT/ours must hold results)")
    a = p.parse_args(argv)
    tasks = load_humaneval(a.split, a.data, limit=a.limit)
    ours = _records(a.out / "ours") if a.skip_ours else run_ours(a)
    peer = run_peer(a, tasks)
    ids = [t.task_id for t in tasks if t.task_id in ours and t.task_id in peer]
    same = [i for i in ids if ours[i]["middle"] == peer[i]["middle"]]
    summary: dict[str, Any] = {
        "model": a.model, "split": a.split, "cases": len(ids), "identical": len(same) / max(1, len(ids)),
        "ours": {"pass@1": sum(bool(ours[i]["passed"]) for i in ids) / max(1, len(ids)), **_lat([ours[i] for i in ids])},
        "llama.cpp": {"pass@1": sum(bool(peer[i]["passed"]) for i in ids) / max(1, len(ids)),
                      "threads": a.threads, **_lat([peer[i] for i in ids])},
        "differ": [i for i in ids if i not in same],
    }
    if a.cut == "llama-vim":
        sel = [t for t in tasks if t.task_id in ids]
        summary["ours"]["pass@1 llama-vim cut"] = _rescore_cut(sel, ours)
        summary["llama.cpp"]["pass@1 llama-vim cut"] = _rescore_cut(sel, peer)
    (a.out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    lines = [f"# {a.model} vs llama.cpp, HumanEval-infilling {a.split}, first {len(ids)}", "",
             "| system | pass@1 | p50 ms | p95 ms |", "|---|---|---|---|"]
    for k in ("ours", "llama.cpp"):
        s = summary[k]
        lines.append(f"| {k} | {s['pass@1']:.1%} | {s.get('p50_ms', 0):.0f} | {s.get('p95_ms', 0):.0f} |")
    lines += ["", f"identical middles: {summary['identical']:.1%} ({len(same)} of {len(ids)})"]
    (a.out / "summary.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
