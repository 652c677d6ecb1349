"""The GPU recipe's alignment stage: KTO on the GPU machine, after training or on the shipped adapter.

engine/ never imports edit_server/, so the stage runs the `edit-server align` commands as subprocesses of its
detached job — ``python -m edit_server align data`` then ``align kto`` — from the boot bundle's code (the GPU
image lacks msgspec / pygls: those commands need neither). Work dir additions::

    align/plan.json      model, device, reference adapter, self-play and KTO options (kept for a resume)
    align/job.json  align/phase.json (corpus | wait-base | data | kto | done | failed)  align/job.log
    align/reference.*    the adapter aligned against: ``run/adapter`` (after training) or the shipped default
    align/data/          `align data`: self-play on ``corpus/`` + the packed feedback stores / eval reports
    align/kto.*          `align kto`: .safetensors/.json/.gate.json/.summary.json/.progress.json, kto.ckpt/

`collect` packs everything a resume or an export needs (plan, reference, data, the newest KTO checkpoint,
and once done the aligned adapter + its reward calibration) into one tar.gz cut in ≤ 15 MiB parts with a
sha256 manifest (`parts`), ``align-NNNNNN-<fingerprint>/``, beside ``align-status.json`` and ``align.log``.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

from engine.tiers import EMBEDDED_SPECS
from engine.train.recipe import COLLECT_PART, ROOT
from engine.train.recipe.job import job_env, wait_base
from engine.train.recipe.parts import PartsError, join, missing, sha256_file, split
from engine.train.recipe.workdir import TERMINAL, RecipeError, Work, alive, read_json, write_json

FORMAT = "edit-server-collected-align/1"
CONFIG = ROOT / "engine" / "train" / "configs" / "gpu_kto.json"
SHIPPED = ROOT / "engine" / "weights" / "default"


class AlignWork:
    def __init__(self, root: Path) -> None:
        self.w = Work(root)
        self.dir = self.w.root / "align"
        self.plan, self.job, self.phase, self.log = (self.dir / n for n in ("plan.json", "job.json", "phase.json",
                                                                           "job.log"))
        self.data, self.kto, self.ref = self.dir / "data", self.dir / "kto", self.dir / "reference"
        self.ckpt = self.dir / "kto.ckpt"

    def out(self, suffix: str) -> Path:
        return self.dir / f"kto{suffix}"


def default_plan() -> dict[str, Any]:
    return json.loads(CONFIG.read_text())


# ---- start / status / stop ---------------------------------------------------------------------
def start(work: Path, plan: dict[str, Any] | None = None, *, adapter: str = "", env: dict[str, str] | None = None,
          python: str = sys.executable) -> dict[str, Any]:
    """Launch the alignment job detached. ``plan`` (None: the one already in the work dir, e.g. restored by a
    resume); ``adapter``: "run" (the training run's), "shipped" (this checkout's default), a path, or "" (the
    run's when there is one, else the shipped one) — used only when the model is the embedded one."""
    a = AlignWork(work)
    if not (a.w.boot / "recipe.json").is_file():
        raise RecipeError(f"{a.w.boot / 'recipe.json'}: not received yet (run `receive` with the first upload)")
    if alive((read_json(a.w.job) or {}).get("pid")):
        raise RecipeError("the training job is still running: `stop` it (and let it end) before aligning")
    st = status(work)
    if st["running"]:
        raise RecipeError(f"alignment job {st['pid']} is already running (phase {st['phase']})")
    have = read_json(a.plan)
    if plan is None:
        if have is None:
            raise RecipeError(f"{a.plan}: no plan (give one, or resume from a collected folder)")
        plan = have
    elif have is not None and a.ckpt.exists():
        if {k: v for k, v in have.items() if k != "reference"} != plan:
            raise RecipeError(f"{a.ckpt} holds a run with another plan: start it without options or remove {a.dir}")
        plan = have
    if have is not None and "reference" in have and a.ref.with_suffix(".safetensors").is_file():
        plan = {**plan, "reference": have["reference"]}  # the copied reference stays the one aligned against
    a.dir.mkdir(parents=True, exist_ok=True)
    if plan.get("model") in EMBEDDED_SPECS and not a.ref.with_suffix(".safetensors").is_file():
        src = _reference(a.w, adapter)
        for ext in (".safetensors", ".json"):
            shutil.copyfile(src.with_suffix(ext), a.ref.with_suffix(ext))
        plan = {**plan, "reference": str(src)}
    write_json(a.plan, plan)
    a.out(".STOP").unlink(missing_ok=True)
    with open(a.log, "ab") as logf:
        proc = subprocess.Popen([python, "-m", "engine.train.gpu_recipe", "align-job", "--work", str(a.w.root)],
                                cwd=a.w.boot / "code", stdout=logf, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, env=job_env(a.w, env), start_new_session=True)
    write_json(a.job, {"pid": proc.pid, "started": time.time()})
    write_json(a.phase, {"phase": "starting", "time": time.time()})
    t0 = time.time()  # until the child has exec'd, its /proc cmdline is not the job's: `alive` would say no
    while not alive(proc.pid) and proc.poll() is None and time.time() - t0 < 10:
        time.sleep(0.01)
    return {"pid": proc.pid, "work": str(a.w.root), "plan": plan}


def _reference(w: Work, adapter: str) -> Path:
    run = w.run / "adapter"
    if adapter == "run" or (not adapter and run.with_suffix(".safetensors").is_file()):
        src = run
    elif adapter in ("shipped", ""):
        src = SHIPPED
    else:
        src = Path(adapter)
    if not src.with_suffix(".safetensors").is_file() or not src.with_suffix(".json").is_file():
        raise RecipeError(f"{src}.safetensors/.json: no adapter to align against")
    return src


def status(work: Path) -> dict[str, Any]:
    """Phase, KTO step, loss, last monitor (loss, reward margin), ETA, newest checkpoint: one flat dict."""
    a = AlignWork(work)
    job = read_json(a.job) or {}
    ph = read_json(a.phase) or {"phase": "not started"}
    prog = read_json(a.out(".progress.json")) or {}
    state = read_json(a.ckpt / "state.json") or {}
    running = alive(job.get("pid"))
    phase = ph["phase"]
    if not running and job and phase not in TERMINAL:
        phase = f"died ({phase})"
    mon = prog.get("monitor") or {}
    data = (read_json(a.data / "summary.json") or {}).get("counts")
    cal = (read_json(a.out(".summary.json")) or {}).get("calibration")
    step = max(prog.get("step") or 0, state.get("step") or 0)  # progress: at most 1/s; a checkpoint: at once
    return {"phase": phase, "running": running, "step": step,
            "steps": prog.get("steps"), "loss": prog.get("loss_avg10"), "z0": prog.get("z0"),
            "monitor_loss": mon.get("loss"), "margin": mon.get("margin"), "eta_s": prog.get("eta_s"),
            "ckpt_step": state.get("step"), "data": data, "calibration": cal,
            "elapsed_s": round(time.time() - job["started"]) if job else None, "pid": job.get("pid"),
            "error": ph.get("error")}


def stop(work: Path) -> dict[str, Any]:
    """Ask `align kto` to checkpoint and end after its current step (it then saves and calibrates)."""
    a = AlignWork(work)
    a.dir.mkdir(parents=True, exist_ok=True)
    a.out(".STOP").touch()
    return status(work)


# ---- the job -----------------------------------------------------------------------------------
def _phase(a: AlignWork, phase: str, **kw: Any) -> None:
    write_json(a.phase, {"phase": phase, "time": time.time(), **kw})
    logging.getLogger(__name__).info("align phase: %s", phase)


def _flags(opts: dict[str, Any]) -> list[str]:
    out: list[str] = []
    for k, v in opts.items():
        out += [f"--{k}"] if v is True else [] if v is False else [f"--{k}", str(v)]
    return out


def commands(a: AlignWork, plan: dict[str, Any]) -> tuple[list[str], list[str]]:
    """The `align data` and `align kto` command lines of ``plan`` (the packed inputs from ``boot/align/``)."""
    edit = [sys.executable, "-m", "edit_server", "align"]
    common = ["--model", plan["model"], "--device", plan.get("device", "auto"), "--threads", str(plan.get("threads", 0))]
    data = [*edit, "data", "--out", str(a.data) + ".building", *common, "--seed", str(plan.get("seed", 0)),
            "--no-progress"]
    if plan.get("selfplay"):
        data += ["--selfplay", str(plan["selfplay"]), "--corpus", str(a.w.corpus)]
        if plan.get("heldout_selfplay") is not None:
            data += ["--heldout-selfplay", str(plan["heldout_selfplay"])]
    for db in sorted((a.w.boot / "align" / "feedback").glob("*.sqlite3")):
        data += ["--feedback", str(db)]
    for run in sorted(p for p in (a.w.boot / "align" / "eval").glob("*") if p.is_dir()):
        data += ["--eval", str(run)]
    kto = [*edit, "kto", "--data", str(a.data), "--out", str(a.kto), *common, "--no-progress",
           *_flags(plan.get("kto") or {})]
    return data, kto


def measure_command(a: AlignWork, plan: dict[str, Any]) -> list[str] | None:
    """`align measure` on the aligned adapter: HumanEval (``measure_limit`` tasks not trained on, the
    packed data) + the held-out self-play outputs; each gate's precision at equal coverage → ``measure/``."""
    if "measure_limit" not in plan:  # the plan asks for the report (configs/gpu_kto.json does)
        return None
    limit = int(plan["measure_limit"] or 0)
    return [sys.executable, "-m", "edit_server", "align", "measure", "--adapter", str(a.kto), "--data", str(a.data),
            "--model", plan["model"], "--device", plan.get("device", "auto"), "--threads",
            str(plan.get("threads", 0)), "--limit", str(limit), "--coverage",
            *[str(c) for c in plan.get("measure_coverage", [0.5, 0.25])], "--out", str(a.dir / "measure"),
            "--no-progress"]


def measure_summary(a: AlignWork) -> dict[str, Any] | None:
    """The at-equal-coverage rows of `align measure` (confidence gate vs KTO reward gate)."""
    for name in ("report.json", "measure.json", "summary.json"):
        got = read_json(a.dir / "measure" / name)
        if got:
            return {"at_coverage": got.get("at_coverage"), "gates": got.get("gates"), "quality": got.get("quality")}
    return None


def run_job(work: Path) -> int:
    """The detached alignment job: (corpus) → (wait for the base) → align data → align kto (resumes) → done."""
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(name)s: %(message)s")
    a = AlignWork(work)
    try:
        recipe = json.loads((a.w.boot / "recipe.json").read_text())
        plan = json.loads(a.plan.read_text())
        env = dict(os.environ)
        if a.ref.with_suffix(".safetensors").is_file():
            env["EDIT_SERVER_ADAPTER"] = str(a.ref)  # `default` = the base + the adapter aligned against
        data_cmd, kto_cmd = commands(a, plan)
        need_data = not (a.data / "summary.json").is_file()
        if need_data and plan.get("selfplay") and not (a.w.corpus / "index.json").is_file():
            _phase(a, "corpus")
            from engine.train.recipe.job import build_job_corpus

            build_job_corpus(a.w, recipe)
        if plan["model"] in EMBEDDED_SPECS and recipe.get("base"):
            _phase(a, "wait-base")
            wait_base(recipe["base"]["name"])
        if need_data:
            _phase(a, "data")
            shutil.rmtree(str(a.data) + ".building", ignore_errors=True)
            _run(data_cmd, env, "align data")
            os.replace(str(a.data) + ".building", a.data)
        _phase(a, "kto")
        resume = ["--resume"] if (a.ckpt / "state.json").is_file() else []
        _run([*kto_cmd, *resume], env, "align kto")
        cmd = measure_command(a, plan)
        if cmd and a.out(".safetensors").is_file():
            _phase(a, "measure")  # the reward gate vs the confidence gate at equal coverage, held out
            try:
                _run(cmd, {**env, "EDIT_SERVER_SHARED": str(a.w.boot)}, "align measure")
            except RecipeError as e:  # the aligned adapter is done: a failed report is logged, not fatal
                logging.getLogger(__name__).warning("%s", e)
        _phase(a, "done")
        return 0
    except BaseException as e:  # noqa: BLE001 - the job's last word goes to phase.json
        traceback.print_exc()
        _phase(a, "failed", error=f"{type(e).__name__}: {e}"[:2000])
        return 1


def _run(cmd: list[str], env: dict[str, str], what: str) -> None:
    logging.getLogger(__name__).info("%s: %s", what, " ".join(cmd))
    sys.stdout.flush()
    sys.stderr.flush()
    rc = subprocess.run(cmd, env=env, stdin=subprocess.DEVNULL).returncode
    if rc != 0:
        raise RecipeError(f"{what} exited with {rc} (see job.log)")


# ---- collect / restore / export ------------------------------------------------------------------
def _members(a: AlignWork) -> tuple[dict[str, Path], dict[str, Any]]:
    """Archive name → file of what a resume/export needs, and the checkpoint's state (hashes checked)."""
    for attempt in range(3):  # the trainer may replace the checkpoint while we look
        state = read_json(a.ckpt / "state.json") or {}
        files = {p: a.ckpt / f["name"] for p, f in (state.get("files") or {}).items()}
        if all(f.is_file() and sha256_file(f) == state["files"][p]["sha256"] for p, f in files.items()):
            break
        if attempt == 2:
            raise PartsError(f"{a.ckpt}: the checkpoint kept changing while it was read")
        time.sleep(0.5)
    out = {"plan.json": a.plan}
    out.update({f"kto.ckpt/{f.name}": f for f in files.values()})
    if files:
        out["kto.ckpt/state.json"] = a.ckpt / "state.json"
    for p in [a.ref.with_suffix(".safetensors"), a.ref.with_suffix(".json"), *sorted(a.data.glob("*"))]:
        if p.is_file():
            out[str(p.relative_to(a.dir))] = p
    for ext in (".safetensors", ".json", ".gate.json", ".summary.json"):
        if a.out(ext).is_file():
            out[f"kto{ext}"] = a.out(ext)
    return out, state


def collect(work: Path, to: Path, *, part_bytes: int = COLLECT_PART, log_bytes: int = 200_000) -> dict[str, Any]:
    """Everything a resume or an export needs → ``to/align-NNNNNN-<fp>/`` (parts + manifest, the previous
    folder removed only once this one is whole; skipped when nothing changed), ``to/align-status.json``,
    ``to/align.log`` (tail)."""
    from engine.train.recipe.collect import back_limits

    a = AlignWork(work)
    to.mkdir(parents=True, exist_ok=True)
    st = status(work)
    result: dict[str, Any] = {"status": st, "collected": time.time()}
    if a.plan.is_file():
        members, state = _members(a)
        fp = sha256_file_list(members)
        step = int(state.get("step", 0))
        d = to / f"align-{step:06d}-{fp[:8]}"
        if not (d / "manifest.json").is_file():
            with tempfile.TemporaryDirectory(prefix="align-collect-") as tmp:
                tar = Path(tmp) / f"align-{step:06d}.tar.gz"
                with tarfile.open(tar, "w:gz", compresslevel=6) as t:
                    for name, path in members.items():
                        t.add(path, arcname=name)
                shutil.rmtree(d, ignore_errors=True)
                entry = split(tar, d, part_bytes)
            (d / "manifest.json").write_text(json.dumps({  # written last: a folder with it is whole
                "format": FORMAT, "step": step, "fingerprint": fp, "archive": entry, "members": sorted(members),
                "plan": read_json(a.plan), "final": "kto.safetensors" in members, "phase": st["phase"],
                "collected": result["collected"]}, indent=1))
        for other in to.glob("align-*"):
            if other.is_dir() and other != d:
                shutil.rmtree(other)
        m = json.loads((d / "manifest.json").read_text())
        result["align"] = {"step": step, "dir": d.name, "parts": len(m["archive"]["parts"]),
                           "bytes": m["archive"]["size"], "final": m["final"]}
    result["measure"] = measure_summary(a)
    (to / "align-status.json").write_text(json.dumps(result, indent=1))
    if a.log.is_file():
        with open(a.log, "rb") as f:
            f.seek(max(0, a.log.stat().st_size - log_bytes))
            (to / "align.log").write_bytes(f.read())
    result["warnings"] = back_limits(to)
    return result


def sha256_file_list(members: dict[str, Path]) -> str:
    """A fingerprint of the members: names, sizes and mtimes (a collect of an unchanged run is skipped)."""
    import hashlib

    h = hashlib.sha256()
    for name, p in sorted(members.items()):
        s = p.stat()
        h.update(f"{name}\0{s.st_size}\0{s.st_mtime_ns}\n".encode())
    return h.hexdigest()


def verify(src: Path) -> dict[str, Any]:
    """The newest collected alignment folder in ``src`` (itself or its ``align-*``) whose parts are intact."""
    dirs = [src] if (src / "manifest.json").is_file() else sorted((p for p in src.glob("align-*") if p.is_dir()),
                                                                   reverse=True)
    why: list[str] = []
    for d in dirs:
        m = read_json(d / "manifest.json")
        if not m or m.get("format") != FORMAT:
            continue
        bad = missing(d, m["archive"])
        if not bad:
            return {**m, "_dir": str(d)}
        why += bad
    raise PartsError("; ".join(why) or f"{src}: no collected alignment (manifest.json) in it")


def _unpack(m: dict[str, Any], dest: Path) -> None:
    with tempfile.TemporaryDirectory(prefix="align-join-") as tmp:
        tar = join(Path(m["_dir"]), m["archive"], Path(tmp) / m["archive"]["name"])
        with tarfile.open(tar, "r:gz") as t:
            t.extractall(dest, **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))


def restore(src: Path, work: Path) -> dict[str, Any]:
    """Verify + unpack a collected alignment into ``work/align`` (a fresh machine continues from it)."""
    a = AlignWork(work)
    m = verify(src)
    if a.dir.exists():
        if alive((read_json(a.job) or {}).get("pid")):
            raise RecipeError("an alignment job is running here: align-stop it first")
        shutil.rmtree(a.dir)
    _unpack(m, a.dir)
    return m


def resume(src: Path, work: Path, *, env: dict[str, str] | None = None) -> dict[str, Any]:
    m = restore(src, work)
    return {"restored": m["_dir"], "step": m["step"], **start(work, None, env=env)}


def export(src: Path, to: Path) -> dict[str, str]:
    """The aligned adapter and its reward calibration of a collected (finished) alignment → ``to``.*."""
    m = verify(src)
    if not m["final"]:
        raise PartsError(f"{m['_dir']}: alignment not finished at step {m['step']} (no kto.safetensors yet); "
                         "collect again once align-status says done")
    with tempfile.TemporaryDirectory(prefix="align-export-") as tmp:
        _unpack(m, Path(tmp))
        to.parent.mkdir(parents=True, exist_ok=True)
        out = {}
        for ext in (".safetensors", ".json", ".gate.json", ".summary.json"):
            if (Path(tmp) / f"kto{ext}").is_file():
                shutil.copyfile(Path(tmp) / f"kto{ext}", f"{to}{ext}")
                out[ext] = f"{to}{ext}"
    return out
