"""GPU recipe: corpus → tokens → train → eval → export on a machine with torch + CUDA, tokenizers and
safetensors, but no network, no ``gguf`` package and ≤ 64 MiB of upload per command.

Stages (``python -m engine.train.gpu_recipe STAGE``; see docs/TRAINING.md for the exact command sequence):

    pack     (here)  split the base GGUF into ≤ 60 MB parts + vendor the pure-Python gguf/yaml packages
    unpack   (GPU)   join the parts into the base cache, checking the pinned sha256
    start    (GPU)   launch corpus → train → export → eval as ONE background job (setsid): it survives the
                     ≤ 10-minute commands, checkpoints often and resumes if started again
    status   (GPU)   step, last log lines, running or not
    collect  (GPU)   copy the adapter (+ summary, eval report) to a folder that comes back (≤ 50 MB)
    dry-run  (CPU)   the whole path on the tiny preset in a temp folder (what the test runs)
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
VENDOR_PKGS = ("gguf", "yaml")


def pack(out: Path, gguf: Path | None = None, part_mb: int = 60) -> dict:
    from engine.loading.base import fetch_base, split_file

    gguf = gguf or fetch_base()
    out.mkdir(parents=True, exist_ok=True)
    parts = split_file(gguf, out / "base", max_bytes=part_mb << 20)
    vendor = out / "vendor"
    for name in VENDOR_PKGS:
        try:
            mod = __import__(name)
        except ImportError:
            continue
        src = Path(mod.__file__).parent
        shutil.copytree(src, vendor / name, dirs_exist_ok=True,
                        ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    return {"parts": [str(p) for p in parts], "vendor": str(vendor)}


def unpack(pack_dir: Path, cache: Path | None = None) -> Path:
    from engine.loading.base import default_cache_dir, join_parts

    manifest = json.loads(next((pack_dir / "base").glob("*.parts.json")).read_text())
    target = (cache or default_cache_dir()) / manifest["name"]
    return join_parts(pack_dir / "base", target)


def job_script(run: Path, config: Path, sets: list[str], srcs: list[str], tokenizer: str,
               eval_limit: int, python: str = sys.executable) -> str:
    """The background job: corpus (once) → train (resumes) → export → HumanEval sample (GPU)."""
    cli = f"{python} -m edit_server.cli"
    corpus = run / "corpus"
    over = " ".join(f"'{s}'" for s in [*sets, f"corpus={corpus}", f"out={run}"])
    lines = [
        "set -e",
        f"cd {ROOT}",
        f"[ -f {corpus}/index.json ] || {cli} train corpus --src {' '.join(srcs)} --out {corpus} "
        f"--tokenizer {tokenizer}",
        f"{cli} train run --config {config} --no-progress --resume --set {over}",
    ]
    if eval_limit:
        lines += [f"{cli} train export --run {run} --to {run}/weights/default",
                  f"EDIT_SERVER_ADAPTER={run}/weights/default {cli} eval humaneval-infill --model default "
                  f"--limit {eval_limit} --out {run}/eval --no-progress || true"]
    lines.append(f"touch {run}/DONE")
    return "\n".join(lines) + "\n"


def start(run: Path, config: Path, sets: list[str], srcs: list[str], tokenizer: str = "base",
          eval_limit: int = 100, vendor: Path | None = None) -> int:
    """Launch the job with setsid (detached: it outlives this command); returns its pid."""
    run.mkdir(parents=True, exist_ok=True)
    (run / "DONE").unlink(missing_ok=True)
    script = run / "job.sh"
    script.write_text(job_script(run, config, sets, srcs, tokenizer, eval_limit))
    env = dict(os.environ)
    paths = [str(ROOT)] + ([str(vendor)] if vendor else [])
    env["PYTHONPATH"] = os.pathsep.join(paths + [env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env.setdefault("TOKENIZERS_PARALLELISM", "true")
    with open(run / "job.log", "ab") as log:
        proc = subprocess.Popen(["bash", str(script)], stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, env=env, start_new_session=True)
    (run / "job.pid").write_text(str(proc.pid))
    return proc.pid


def status(run: Path) -> dict:
    pid = int((run / "job.pid").read_text()) if (run / "job.pid").is_file() else None
    alive = False
    if pid:
        try:
            os.kill(pid, 0)
            alive = not _zombie(pid)
        except OSError:
            alive = False
    state = run / "ckpt" / "state.json"
    step = json.loads(state.read_text())["step"] if state.is_file() else 0
    log = (run / "job.log").read_text(errors="replace")[-1500:] if (run / "job.log").is_file() else ""
    return {"pid": pid, "running": alive, "done": (run / "DONE").is_file(), "step": step, "log_tail": log}


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] == "Z"
    except OSError:
        return False


def collect(run: Path, to: Path) -> list[Path]:
    to.mkdir(parents=True, exist_ok=True)
    got = []
    for name in ("adapter.safetensors", "adapter.json", "summary.json", "job.log"):
        if (run / name).is_file():
            got.append(Path(shutil.copy2(run / name, to / name)))
    report = run / "eval"
    if report.is_dir():
        for f in report.glob("*.json"):
            if f.stat().st_size < 5 << 20:
                got.append(Path(shutil.copy2(f, to / f"eval-{f.name}")))
    return got


def dry_run(work: Path, timeout_s: float = 240.0) -> dict:
    """CPU path of the recipe on the tiny preset: pack/unpack a file, start, poll, collect."""
    from engine.loading.base import join_parts, split_file

    work.mkdir(parents=True, exist_ok=True)
    blob = work / "fake.gguf"
    blob.write_bytes(os.urandom(300_000))
    split_file(blob, work / "pack" / "base", max_bytes=100_000)
    joined = join_parts(work / "pack" / "base", work / "cache" / "fake.gguf")
    assert joined.read_bytes() == blob.read_bytes()
    src = work / "src"
    src.mkdir(exist_ok=True)
    for i in range(12):
        body = "".join(f"def f{i}_{j}(a, b):\n    return a + b * {j}\n\n\n" for j in range(8))
        (src / f"m{i}.py").write_text(f"import os\n\n\n{body}print(f{i}_0(1, 2))\n")
    config = work / "config.json"
    config.write_text(json.dumps({"model": "tiny", "seq_len": 160, "block_size": 8, "max_canvas": 32,
                                  "chars_per_token": 1.0, "batch_size": 2, "steps": 6, "save_every": 2,
                                  "val_every": 3, "val_examples": 2, "threads": 1}))
    run = work / "run"
    start(run, config, [], [str(src)], tokenizer="byte", eval_limit=0)
    t0 = time.time()
    while time.time() - t0 < timeout_s:
        st = status(run)
        if st["done"] or not st["running"]:
            break
        time.sleep(1.0)
    st = status(run)
    return {"status": st, "collected": [str(p) for p in collect(run, work / "out")]}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m engine.train.gpu_recipe", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="stage", required=True)
    a = sub.add_parser("pack")
    a.add_argument("--out", type=Path, default=ROOT / "runs" / "gpu-pack")
    a.add_argument("--gguf", type=Path)
    b = sub.add_parser("unpack")
    b.add_argument("--pack", type=Path, default=ROOT / "runs" / "gpu-pack")
    c = sub.add_parser("start")
    c.add_argument("--run", type=Path, default=ROOT / "runs" / "gpu")
    c.add_argument("--config", type=Path, default=ROOT / "engine" / "train" / "configs" / "gpu_smollm2.json")
    c.add_argument("--set", nargs="*", default=[])
    c.add_argument("--src", nargs="+", default=None, help="source trees (default: this Python's lib)")
    c.add_argument("--eval-limit", type=int, default=100)
    c.add_argument("--vendor", type=Path, default=ROOT / "runs" / "gpu-pack" / "vendor")
    d = sub.add_parser("status")
    d.add_argument("--run", type=Path, default=ROOT / "runs" / "gpu")
    e = sub.add_parser("collect")
    e.add_argument("--run", type=Path, default=ROOT / "runs" / "gpu")
    e.add_argument("--to", type=Path, required=True)
    f = sub.add_parser("dry-run")
    f.add_argument("--work", type=Path, default=ROOT / "runs" / "gpu-dry")
    args = p.parse_args(argv)
    if args.stage == "pack":
        out = pack(args.out, args.gguf)
    elif args.stage == "unpack":
        out = {"base": str(unpack(args.pack))}
    elif args.stage == "start":
        import sysconfig

        srcs = args.src or [sysconfig.get_paths()["stdlib"], sysconfig.get_paths()["purelib"]]
        out = {"pid": start(args.run, args.config, args.set, srcs, eval_limit=args.eval_limit,
                            vendor=args.vendor if args.vendor.is_dir() else None)}
    elif args.stage == "status":
        out = status(args.run)
    elif args.stage == "collect":
        out = {"collected": [str(x) for x in collect(args.run, args.to)]}
    else:
        out = dry_run(args.work)
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
