"""The GPU side: start the detached job, the job itself, status, stop (uploads: `receive`; paths: `workdir`).

Work dir (default ``~/edit-server-gpu``, outside the repository copy that each command re-syncs)::

    parts/      received parts + manifest.json          boot/     code, vendor, site (wheels), data, recipe
    corpus/     built here from this Python's lib       run/      trainer out: ckpt/, progress.json, adapter.*,
    job.json    pid, start time                                   summary.json, eval/<split>/report.json,
    window.json the window's clock and plan                       throughput.json (s/step on this kind)
    bench/      engine.json, latency.json (engine.train.recipe.bench_gpu)
    phase.json  corpus | wait-base | wait-bench | train | eval | latency | done | failed      job.log   everything the job printed
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
import sysconfig
import time
import traceback
from pathlib import Path
from typing import Any

from engine.tiers import EMBEDDED
from engine.train.recipe.workdir import TERMINAL, RecipeError, Work, alive, read_json, write_json

log = logging.getLogger(__name__)


# ---- start / status / stop -------------------------------------------------------------------
def job_env(w: Work, extra: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ)
    paths = [str(w.boot / n) for n in ("code", "vendor", "site")]
    env["PYTHONPATH"] = os.pathsep.join([*paths, env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env.update({"PYTHONHASHSEED": "0", "PYTHONUNBUFFERED": "1", "TOKENIZERS_PARALLELISM": "true"})
    env.update(extra or {})
    return env


def start(work: Path, sets: dict[str, Any] | None = None, *, env: dict[str, str] | None = None,
          python: str = sys.executable, window: dict[str, Any] | None = None) -> dict[str, Any]:
    """Launch the job detached (setsid): it outlives the command; returns its pid. ``window``: the GPU
    window's clock (`recipe.window`: start, budget_s, train_end_s, eval_s, latency_s, extend_from)."""
    w = Work(work)
    if not (w.boot / "recipe.json").is_file():
        raise RecipeError(f"{w.boot / 'recipe.json'}: not received yet (run `receive` with the first upload)")
    st = status(work)
    if st["running"]:
        raise RecipeError(f"job {st['pid']} is already running (phase {st['phase']})")
    if window:
        from engine.train.recipe.window import write_window

        write_window(w.root, **window)
    write_json(w.root / "sets.json", sets or {})
    (w.run / "STOP").unlink(missing_ok=True)
    with open(w.log, "ab") as logf:
        proc = subprocess.Popen([python, "-m", "engine.train.gpu_recipe", "job", "--work", str(w.root)],
                                cwd=w.boot / "code", stdout=logf, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, env=job_env(w, env), start_new_session=True)
    write_json(w.job, {"pid": proc.pid, "started": time.time()})
    write_json(w.phase, {"phase": "starting", "time": time.time()})
    return {"pid": proc.pid, "work": str(w.root)}


def status(work: Path) -> dict[str, Any]:
    """Phase, step, loss, tokens/s, ETA, newest checkpoint: one flat dict (printed as one JSON line)."""
    w = Work(work)
    job = read_json(w.job) or {}
    ph = read_json(w.phase) or {"phase": "not started"}
    prog = read_json(w.run / "progress.json") or {}
    ck = read_json(w.run / "ckpt" / "latest.json") or {}
    running = alive(job.get("pid"))
    phase = ph["phase"]
    if not running and job and phase not in TERMINAL:
        phase = f"died ({phase})"
    # the progress file is rewritten at most once a second, a checkpoint at once: a poll right after a
    # checkpoint (or a kill) may read an older step there
    step = max(prog.get("step") or 0, ck.get("step") or 0)
    return {"phase": phase, "running": running, "step": step,
            "steps": prog.get("steps"), "loss": prog.get("loss_avg10"), "val_loss": prog.get("val_loss"),
            "tok_s": prog.get("tok_s"), "eta_s": prog.get("eta_s"), "ckpt_step": ck.get("step"),
            "elapsed_s": round(time.time() - job["started"]) if job else None, "pid": job.get("pid"),
            "error": ph.get("error")}


def stop(work: Path) -> dict[str, Any]:
    """Ask the trainer to checkpoint, export and end after its current step (the job then evaluates)."""
    w = Work(work)
    w.run.mkdir(parents=True, exist_ok=True)
    (w.run / "STOP").touch()
    return status(work)


# ---- the job -----------------------------------------------------------------------------------
def _phase(w: Work, phase: str, **kw: Any) -> None:
    write_json(w.phase, {"phase": phase, "time": time.time(), **kw})
    log.info("phase: %s", phase)


def resolve_sources(sources: list[str]) -> list[Path]:
    """``stdlib`` / ``purelib`` / ``platlib`` → this Python's folders; anything else is a path."""
    paths = sysconfig.get_paths()
    out: list[Path] = []
    for s in sources:
        p = Path(paths[s]) if s in paths else Path(s)
        if p.is_dir() and all(p.resolve() != q.resolve() for q in out):
            out.append(p)
    return out


def build_job_corpus(w: Work, recipe: dict[str, Any]) -> dict[str, Any]:
    from engine.tokenizer import Tokenizer
    from engine.train.corpus import CorpusOptions, build_corpus

    if (w.corpus / "index.json").is_file():
        return json.loads((w.corpus / "index.json").read_text())
    t = recipe["tokenizer"]
    tok = (Tokenizer.byte_level() if t.get("byte") else
           Tokenizer.from_file(w.boot / t["file"], eos_token=t["eos"]))
    srcs = resolve_sources(recipe["corpus"]["sources"])
    log.info("corpus sources: %s", [str(s) for s in srcs])
    tmp = w.root / "corpus.building"
    shutil.rmtree(tmp, ignore_errors=True)
    index = build_corpus(srcs, tmp, tok, tokenizer_name="byte" if t.get("byte") else "base",
                         opts=CorpusOptions(**recipe["corpus"]["options"]))
    os.replace(tmp, w.corpus)
    log.info("corpus: %s docs, %s tokens, digest %s", index["docs"], index["tokens"], index["digest"][:12])
    return index


def job_config(w: Work, recipe: dict[str, Any], sets: dict[str, Any], *, kind: str | None = None,
               now: float | None = None) -> Any:
    """The recipe's config — or, when a checkpoint is here, the checkpoint's — plus ``sets``; in a window
    (``window.json``) with the deadline and the steps that fit it, and for the checkpoint a window extends
    (``resume --extend``) a warm restart (`recipe.window.window_config`)."""
    from engine.train.recipe.window import read_window, window_config
    from engine.train.train_state import latest_checkpoint, read_state
    from engine.train.trainer import TrainConfig

    d = dict(recipe["config"])
    ck = latest_checkpoint(w.run / "ckpt")
    step, state = 0, None
    if ck is not None:
        state = read_state(ck)
        d, step = dict(state["config"]), int(state["step"])
    win = read_window(w.root)
    restart = bool(win and win.get("extend_from") is not None and step == win["extend_from"] and step > 0)
    if restart and state is not None:
        have = (state.get("corpus") or {}).get("digest")
        idx = read_json(w.corpus / "index.json") or {}
        if have and idx.get("digest") and have != idx["digest"]:
            log.warning("warm restart on another corpus (digest %s, the checkpoint's %s): same recipe, new "
                        "machine image?", idx["digest"][:12], have[:12])
    d = window_config(d, win, step=step, kind=kind or gpu_kind(), recipe_config=recipe["config"],
                      restart=restart, now=now, sets=sets)
    if restart:
        log.info("warm restart at step %d: steps %d, warmup %d, mix %s", step, d["steps"], d["warmup"], d["mix"])
    d.update(corpus=str(w.corpus), out=str(w.run))
    return TrainConfig.from_dict(d)


def checkpoint_config(w: Work) -> dict[str, Any] | None:
    from engine.train.train_state import latest_checkpoint, read_state

    ck = latest_checkpoint(w.run / "ckpt")
    return None if ck is None else dict(read_state(ck)["config"])


def gpu_kind() -> str:
    """This machine's device kind (``nvidia-h200``, ``nvidia-h100-x1``, ...; ``cpu`` without CUDA)."""
    import torch

    from engine.train.recipe.throughput import device_kind

    return device_kind(torch.cuda.get_device_name(0)) if torch.cuda.is_available() else "cpu"


def wait_base(name: str, timeout_s: float = 1200.0) -> Path:
    from engine.loading.base import default_cache_dir

    target = default_cache_dir() / name
    t0 = time.time()
    while not target.is_file():
        if time.time() - t0 > timeout_s:
            raise RecipeError(f"{target}: base not received after {timeout_s:.0f} s")
        time.sleep(2.0)
    return target


def run_eval(w: Work, recipe: dict[str, Any], seconds: float = 0.0) -> None:
    """The held-out repositories' edit tokens teacher-forced (``eval/edit-tokens``, when the pack carries their
    sessions: `engine/train/edit_tokens.py`), their next edits in process (``eval/next-edit``, when it carries
    cases: `evals/next_edit.py`), then HumanEval-infilling on the run's adapter, each a subprocess (``python -m
    engine.train.edit_tokens`` / ``python -m evals``: the GPU image's packages suffice). ``seconds`` > 0: they
    share that budget; a HumanEval split out of time is stopped and summarised from the results it finished
    (``eval/<split>/partial.json``)."""
    ev = recipe.get("eval") or {}
    splits = ((["edit-tokens"] if ev.get("edit_tokens") else []) + (["next-edit"] if ev.get("next_edit") else [])
              + (list(ev.get("splits", [])) if ev.get("limit") else []))
    t_end = time.time() + seconds
    for i, split in enumerate(splits):
        out = w.run / "eval" / split
        left = (t_end - time.time()) / (len(splits) - i) if seconds > 0 else None
        if left is not None and left < 5:
            log.info("eval %s: skipped (no time left in the window)", split)
            continue
        if split == "edit-tokens":  # teacher-forced: one pass over 32 held-out edit examples, seconds
            cmd = [sys.executable, "-m", "engine.train.edit_tokens", str(w.boot / ev["edit_tokens"]), "--model",
                   EMBEDDED, "--examples", "32", "--out", str(out)]
        elif split == "next-edit":  # it stops itself in time, reporting what it finished
            cmd = [sys.executable, "-m", "evals", "next-edit", str(w.boot / ev["next_edit"]), "--model", EMBEDDED,
                   "--out", str(out), "--no-progress",
                   *(["--budget-s", f"{max(1.0, left - 10):.0f}"] if left is not None else [])]
        else:
            cmd = [sys.executable, "-m", "evals", "humaneval-infill", "--model", EMBEDDED, "--split", split,
                   "--limit", str(ev["limit"]), "--out", str(out), "--no-progress",
                   "--data", str(w.boot / "data" / "humaneval-infilling")]
        env = {**os.environ, "EDIT_SERVER_ADAPTER": str(w.run / "adapter")}
        try:
            rc = subprocess.run(cmd, env=env, stdin=subprocess.DEVNULL, timeout=left).returncode
            log.info("eval %s: exit %d", split, rc)
        except subprocess.TimeoutExpired:
            log.info("eval %s: stopped after %.0f s: %s", split, left, partial_eval(out, split))


def partial_eval(out: Path, split: str) -> dict[str, Any]:
    """pass@1 over the finished records of a stopped eval (``results.jsonl``) → ``partial.json``."""
    if split == "edit-tokens":  # one pass, no records: nothing to summarise from a stopped one
        summary: dict[str, Any] = {"split": split, "n": 0, "partial": True}
        write_json(out / "partial.json", {"summary": summary})
        return summary
    recs = []
    for line in (out / "results.jsonl").read_text().splitlines() if (out / "results.jsonl").is_file() else []:
        try:
            recs.append(json.loads(line))
        except ValueError:
            continue
    n = len(recs)
    if split == "next-edit":  # `evals.next_edit` records: exact among the next-edit cases finished
        nxt = [r for r in recs if r.get("category") == "next-edit"]
        summary = {"split": split, "n": n, "partial": True,
                   "next_edit_exact": sum(bool(r.get("exact")) for r in nxt) / len(nxt) if nxt else None}
        write_json(out / "partial.json", {"summary": summary})
        return summary
    summary = {"split": split, "n": n, "partial": True,
               "pass@1": sum(bool(r.get("passed")) for r in recs) / n if n else None,
               "latency_ms_p50": sorted(r["latency_ms"] for r in recs if r.get("latency_ms") is not None)[n // 2]
               if n else None}
    write_json(out / "partial.json", {"summary": summary})
    return summary


def run_latency(w: Work, seconds: float) -> None:
    """The trained default's single-line and next-edit latency on this machine (``engine.train.recipe.bench_gpu latency``)."""
    cmd = [sys.executable, "-m", "engine.train.recipe.bench_gpu", "latency", "--model", EMBEDDED, "--budget-s",
           str(int(seconds)), "--out", str(w.root / "bench" / "latency.json")]
    env = {**os.environ, "EDIT_SERVER_ADAPTER": str(w.run / "adapter")}
    try:
        rc = subprocess.run(cmd, env=env, stdin=subprocess.DEVNULL, timeout=seconds + 30).returncode
        log.info("latency: exit %d", rc)
    except subprocess.TimeoutExpired:
        log.info("latency: stopped after %.0f s", seconds + 30)


def wait_bench(w: Work, timeout_s: float = 150.0) -> None:
    """The detached engine bench (`bench`) has the GPU to itself: training waits for it (at most ``timeout_s``)."""
    pid = (read_json(w.root / "bench" / "job.json") or {}).get("pid")
    t0 = time.time()
    while pid and alive(pid, b"bench_gpu") and time.time() - t0 < timeout_s:
        time.sleep(1.0)


def start_bench(work: Path, budget_s: float, *, python: str = sys.executable,
                env: dict[str, str] | None = None, extra: list[str] | None = None) -> dict[str, Any]:
    """Launch ``engine.train.recipe.bench_gpu engine`` detached (random weights: no base needed) → ``WORK/bench/engine.json``."""
    w = Work(work)
    d = w.root / "bench"
    d.mkdir(parents=True, exist_ok=True)
    code = w.boot / "code" if (w.boot / "code").is_dir() else Path.cwd()
    with open(d / "engine.log", "ab") as logf:
        proc = subprocess.Popen([python, "-m", "engine.train.recipe.bench_gpu", "engine", "--budget-s", str(int(budget_s)),
                                 "--out", str(d / "engine.json"), "--job-phase", str(w.phase), *(extra or [])],
                                cwd=code, stdout=logf,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=job_env(w, env),
                                start_new_session=True)
    write_json(d / "job.json", {"pid": proc.pid, "started": time.time()})
    return {"bench_pid": proc.pid}


def record_speed(w: Work, cfg: Any, summary: dict[str, Any]) -> dict[str, Any] | None:
    """``run/throughput.json``: this run's seconds per step on this kind (`gpu_recipe keep` records it)."""
    steps = summary["steps"] - summary["resumed_from"]
    if steps <= 0 or not summary.get("run_seconds"):
        return None
    kind = gpu_kind()
    rec = {"kind": kind, "model": cfg.model, "s_per_step": summary["run_seconds"] / steps,
           "tok_s": summary["run_tokens"] / summary["run_seconds"], "tokens_per_step": summary["run_tokens"] / steps,
           "steps": steps, "measured": f"{time.strftime('%Y-%m-%d')}, steps {summary['resumed_from']}-"
           f"{summary['steps']} (seq {cfg.seq_len}, batch {cfg.batch_size} x {cfg.grad_accum}, rank {cfg.rank})"}
    write_json(w.run / "throughput.json", rec)
    log.info("throughput: %s", rec)
    return rec


def run_job(work: Path) -> int:
    """The detached job: corpus → (wait for the base) → train (resumes) → eval → done."""
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(name)s: %(message)s")
    w = Work(work)
    try:
        recipe = json.loads((w.boot / "recipe.json").read_text())
        sets = read_json(w.root / "sets.json") or {}
        log.info("job %d, code %s, python %s", os.getpid(), Path(__file__).resolve().parents[3], sys.version)
        _phase(w, "corpus")
        build_job_corpus(w, recipe)
        model = {**(checkpoint_config(w) or recipe["config"]), **sets}.get("model", "base")
        if model != "tiny" and recipe.get("base"):  # SmolLM2's, or a parted base's tied-output copy
            _phase(w, "wait-base")
            wait_base(recipe["base"]["name"])
        _phase(w, "wait-bench")  # the corpus is built: the engine bench, waiting that out, measures now
        wait_bench(w)
        from engine.train.recipe.window import read_window

        win = read_window(w.root) or {}
        cfg = job_config(w, recipe, sets)  # now: the deadline fixes the steps
        _phase(w, "train")
        from engine.train.trainer import train

        summary = train(cfg, resume=True, progress=False)
        log.info("trained to step %d (%d tokens)", summary["steps"], summary["tokens"])
        record_speed(w, cfg, summary)
        if cfg.model != "tiny":  # a real base: the adapter serves (SmolLM2's or a parted base's)
            _phase(w, "eval")
            run_eval(w, recipe, float(win.get("eval_s") or 0))
            if win.get("latency_s"):
                _phase(w, "latency")
                run_latency(w, float(win["latency_s"]))
        _phase(w, "done")
        return 0
    except BaseException as e:  # noqa: BLE001 - the job's last word goes to phase.json
        traceback.print_exc()
        _phase(w, "failed", error=f"{type(e).__name__}: {e}"[:2000])
        return 1
