"""Checkpoints off the GPU and back on: collect (GPU → ``$OUT``), keep (here → engine/weights/gpu-ckpt, or
``gpu-ckpt-<base>`` for a parted base),
restore/resume (any later window), export (checkpoint → adapter pair), and the checkpoint's size.

A collected folder ``ckpt-NNNNNN/``: ``manifest.json`` (step, config, validation curve, the checkpoint
file's sha256 and its parts' sha256; written last) + ``<step file>.partNNN`` (≤ 15 MiB each). A new step
gets a new folder and the old one goes only after it is whole, so a command killed mid-collect still
returns a whole checkpoint. Parts are byte ranges of the one
safetensors checkpoint (`engine.train.train_state`), so joining them gives that file bit for bit.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from engine.train.recipe import BACK_FILE_MAX, BACK_FILES, BACK_TOTAL, COLLECT_PART, COMMIT_MAX, keep_dir
from engine.train.recipe.job import start, status
from engine.train.recipe.parts import PartsError, join, missing, split
from engine.train.recipe.workdir import Work, read_json

FORMAT = "edit-server-collected-ckpt/1"


def collect(work: Path, to: Path, *, part_bytes: int = COLLECT_PART, log_bytes: int = 200_000) -> dict[str, Any]:
    """Newest checkpoint in parts + manifest → ``to/ckpt-NNNNNN/`` (kept if already there), ``to/status.json``,
    ``to/job.log`` (tail)."""
    from engine.train.train_state import latest_checkpoint, read_state

    w = Work(work)
    to.mkdir(parents=True, exist_ok=True)
    result: dict[str, Any] = {"status": status(work), "collected": time.time()}
    ck = None
    for attempt in range(3):  # the trainer may prune the file we read (it keeps the last two)
        ck = latest_checkpoint(w.run / "ckpt")
        if ck is None:
            break
        try:
            state = read_state(ck)
            d = to / f"ckpt-{state['step']:06d}"
            old = read_json(d / "manifest.json") or {}
            if old.get("checkpoint", {}).get("name") != ck.name:  # not collected yet (else: nothing to do)
                shutil.rmtree(d, ignore_errors=True)
                entry = split(ck, d, part_bytes)
                recipe = read_json(w.boot / "recipe.json") or {}
                (d / "manifest.json").write_text(json.dumps({  # written last: a folder with it is whole
                    "format": FORMAT, "step": state["step"], "checkpoint": entry, "config": state["config"],
                    "val": state["val"], "tokens": state["tokens"], "seconds": state["seconds"],
                    "corpus": state["corpus"], "code": recipe.get("code"), "collected": result["collected"]},
                    indent=1))
            break
        except (FileNotFoundError, PartsError):
            if attempt == 2:
                raise
    if ck is not None:
        for other in to.glob("ckpt-*"):
            if other != d:
                shutil.rmtree(other)
        entry = json.loads((d / "manifest.json").read_text())["checkpoint"]
        hist = state["history"]
        every = max(1, len(hist) // 200)
        result["checkpoint"] = {"step": state["step"], "dir": d.name, "parts": len(entry["parts"]),
                                "bytes": entry["size"]}
        result["loss_curve"] = [[h["step"], round(h["loss"], 5)] for h in hist[::every]]
        result["val"] = state["val"]
    evals = {}
    for d in sorted(p for p in (w.run / "eval").glob("*") if p.is_dir()):
        got = read_json(d / "report.json") or read_json(d / "partial.json") or {}
        if got:
            evals[d.name] = got.get("summary")
    result["eval"] = evals
    for key, path in (("throughput", w.run / "throughput.json"), ("bench_engine", w.root / "bench" / "engine.json"),
                      ("bench_latency", w.root / "bench" / "latency.json"), ("window", w.root / "window.json")):
        if path.is_file():
            result[key] = read_json(path)
    examples = (read_json(w.run / "summary.json") or {}).get("examples")
    if examples:  # the mix as trained: per kind, draws tried and examples made (a starved kind shows)
        result["examples"] = examples
    bench_log = tail_bytes(w.root / "bench" / "engine.log", BENCH_LOG_BYTES)
    if bench_log:  # the detached engine bench's own output: why it stopped where it did (no other record says)
        result["bench_engine_log"] = bench_log.decode("utf-8", "replace")
    (to / "status.json").write_text(json.dumps(result, indent=1))
    if w.log.is_file():
        (to / "job.log").write_bytes(tail_bytes(w.log, log_bytes))
    result["warnings"] = back_limits(to)
    return {k: v for k, v in result.items() if k not in ("loss_curve", "val", "bench_engine", "bench_latency")}


BENCH_LOG_BYTES = 4000


def tail_bytes(path: Path, n: int) -> bytes:
    """The last ``n`` bytes of ``path`` (b"" when it is not there)."""
    if not path.is_file():
        return b""
    with open(path, "rb") as f:
        f.seek(max(0, path.stat().st_size - n))
        return f.read()


def back_limits(out: Path) -> list[str]:
    """What would not come back from a device command's ``$OUT`` (files, sizes, depth)."""
    files = [p for p in out.rglob("*") if p.is_file()]
    warn = []
    if len(files) > BACK_FILES:
        warn.append(f"{len(files)} files (at most {BACK_FILES} come back)")
    warn += [f"{p.relative_to(out)}: {p.stat().st_size} bytes > {BACK_FILE_MAX}" for p in files
             if p.stat().st_size > BACK_FILE_MAX]
    warn += [f"{p.relative_to(out)}: too deep" for p in files if len(p.relative_to(out).parts) > 3]
    total = sum(p.stat().st_size for p in files)
    if total > BACK_TOTAL:
        warn.append(f"{total} bytes in all > {BACK_TOTAL}")
    return warn


def _manifests(src: Path) -> list[dict[str, Any]]:
    """Collected checkpoint manifests in ``src`` (itself, or its ``ckpt-NNNNNN`` folders), newest first."""
    dirs = [src] if (src / "manifest.json").is_file() else sorted(src.glob("ckpt-*"), reverse=True)
    out = []
    for d in dirs:
        m = read_json(d / "manifest.json")
        if m and m.get("format") == FORMAT:
            out.append({**m, "_dir": str(d)})
    if not out:
        raise PartsError(f"{src}: no collected checkpoint (manifest.json) in it")
    return out


def verify(src: Path) -> dict[str, Any]:
    """The newest collected checkpoint in ``src`` whose every part is intact (else PartsError)."""
    why = []
    for m in _manifests(src):
        bad = missing(Path(m["_dir"]), m["checkpoint"])
        if not bad:
            return m
        why += bad
    raise PartsError("; ".join(why))


def keep(src: Path, dest: Path | None = None, *, force: bool = False) -> dict[str, Any]:
    """Verify a collected folder and store it at ``dest`` (default: the run's base's `keep_dir`,
    committable when ≤ 50 MB) unless ``dest`` holds a later step — or another base's checkpoint (refused
    without ``force``: SmolLM2's and Qwen's never overwrite each other)."""
    m = verify(src)
    model = str(m.get("config", {}).get("model", "base")).strip().lower()
    dest = keep_dir(model) if dest is None else Path(dest)
    old = read_json(dest / "manifest.json") or {}
    theirs = str(old.get("config", {}).get("model", model)).strip().lower()
    if old and theirs != model and not force:
        raise PartsError(f"{dest} holds a checkpoint of {theirs!r}, not of {model!r} (keep it in "
                         f"{keep_dir(model)}, or force)")
    if old.get("step", -1) > m["step"] and not force:
        return {"kept": False, "why": f"{dest} already holds step {old['step']} > {m['step']}"}
    tmp = Path(tempfile.mkdtemp(prefix=".keep-", dir=dest.parent if dest.parent.is_dir() else None))
    for p in m["checkpoint"]["parts"]:
        shutil.copyfile(Path(m["_dir"]) / p["name"], tmp / p["name"])
    shutil.copyfile(Path(m["_dir"]) / "manifest.json", tmp / "manifest.json")
    if dest.exists():
        shutil.rmtree(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.move(str(tmp), dest)
    size = m["checkpoint"]["size"]
    return {"kept": True, "step": m["step"], "dest": str(dest), "bytes": size, "committable": size <= COMMIT_MAX,
            "model": model}


def restore(src: Path, work: Path, *, force: bool = False) -> Path:
    """Join a collected/kept checkpoint into ``work/run/ckpt`` (the job resumes from it)."""
    from engine.train.train_state import LATEST, latest_checkpoint, read_state, write_json_atomic

    m = verify(src)
    d = Work(work).run / "ckpt"
    have = latest_checkpoint(d)
    if have is not None and read_state(have)["step"] > m["step"] and not force:
        raise PartsError(f"{have} is newer than step {m['step']} (force to replace it)")
    path = join(Path(m["_dir"]), m["checkpoint"], d / m["checkpoint"]["name"])
    write_json_atomic(d / LATEST, {"file": path.name, "step": m["step"]})
    return path


def resume(src: Path, work: Path, sets: dict[str, Any] | None = None, *, env: dict[str, str] | None = None,
           force: bool = False, extend: bool = False, window: dict[str, Any] | None = None) -> dict[str, Any]:
    """Restore ``src`` into the work dir and start the job on it: exactly where it stopped, or with
    ``extend`` a warm restart over the steps the window fits (``window``: see `recipe.window`)."""
    path = restore(src, work, force=force)
    win = dict(window or {})
    if extend:
        win["extend_from"] = verify(src)["step"]
    return {"restored": str(path), **({"extend_from": win["extend_from"]} if extend else {}),
            **start(work, sets, env=env, window=win or None)}


def restore_into(src: Path, work: Path, *, force: bool = False, extend: bool = False) -> dict[str, Any]:
    """`restore` for a job that is already running (waiting for the base): the checkpoint, and with
    ``extend`` the window's note that the job warm-restarts from it."""
    from engine.train.recipe.window import write_window

    path = restore(src, work, force=force)
    out: dict[str, Any] = {"restored": str(path)}
    if extend:
        out["extend_from"] = write_window(work, extend_from=verify(src)["step"])["extend_from"]
    return out


def record(src: Path, *, force: bool = False) -> dict[str, Any]:
    """A collected folder's measured seconds per step (``status.json``' throughput) → recipe/throughput.json."""
    from engine.train.recipe.throughput import record_throughput

    st = read_json(Path(src) / "status.json") or {}
    got = st.get("throughput")
    if not got:
        return {"recorded": False, "why": f"{src}/status.json has no throughput (the job has not trained yet)"}
    return {"recorded": record_throughput(got, force=force), **got}


def export(src: Path, to: Path) -> tuple[Path, Path]:
    """The adapter pair (``to``.safetensors + ``to``.json) inside a checkpoint file or collected folder."""
    from safetensors.torch import save_file

    from engine.train.train_state import adapter_part, read_checkpoint

    with tempfile.TemporaryDirectory() as tmp:
        if src.is_dir():
            m = verify(src)
            src = join(Path(m["_dir"]), m["checkpoint"], Path(tmp) / "ckpt.safetensors")
        tensors, state = read_checkpoint(src)
    to.parent.mkdir(parents=True, exist_ok=True)
    st, js = to.with_suffix(".safetensors"), to.with_suffix(".json")
    save_file(adapter_part(tensors), str(st))
    js.write_text(json.dumps(state["adapter_meta"], indent=1, sort_keys=True))
    return st, js


def checkpoint_bytes(config: dict[str, Any]) -> int:
    """Tensor bytes of one checkpoint for ``config``: fp32 weights + 2 AdamW moments in ``ckpt_moments``'
    dtype (fp32 or bf16), of the LoRA matrices, the norms and the added embedding rows."""
    from engine.config import PRESETS, preset
    from engine.tokens import SPECIAL_TOKENS
    from engine.train.lora import DEFAULT_TARGETS

    model = str(config.get("model", "base")).strip().lower()
    a = preset(model if model in PRESETS else "smollm2-135m")
    if config.get("tied_output"):
        a.tie_embeddings = True
    hd = a.head_dim
    shapes = {"q_proj": (a.dim, a.n_heads * hd), "k_proj": (a.dim, a.n_kv_heads * hd),
              "v_proj": (a.dim, a.n_kv_heads * hd), "o_proj": (a.n_heads * hd, a.dim),
              "gate_proj": (a.dim, a.intermediate_size), "up_proj": (a.dim, a.intermediate_size),
              "down_proj": (a.intermediate_size, a.dim)}
    rank = int(config.get("rank", 16))
    lora = sum(rank * sum(shapes[t]) for t in config.get("targets", DEFAULT_TARGETS)) * a.n_layers
    norms = (2 * a.n_layers + 1) * a.dim
    rows = ADDED_ROWS.get(model, len(SPECIAL_TOKENS)) * a.dim * (1 if a.tie_embeddings else 2)
    from engine.train.train_state import MOMENT_DTYPES

    moment = MOMENT_DTYPES.get(str(config.get("ckpt_moments", "float32")), MOMENT_DTYPES["float32"])
    return (4 + 2 * moment.itemsize) * (lora + norms + rows)


# trained embedding rows of a base whose vocabulary already holds reserved slots (the adapter JSON's
# added_rows.count: Qwen2.5-Coder's rows from <|fim_prefix|> on); others append len(SPECIAL_TOKENS) rows
ADDED_ROWS = {"qwen2.5-coder-0.5b": 277}
