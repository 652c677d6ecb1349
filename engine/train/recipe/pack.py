"""`pack` (here, with network and the repo): everything a bare GPU machine needs, cut into upload folders.

``OUT/boot.tar.xz`` (small, first): ``code/`` (engine + evals + edit_server as in this working tree), ``vendor/``
(pure-Python packages the GPU image lacks: gguf), ``wheels/`` (tree-sitter + grammars for the GPU's
CPython, for syntax-span FIM), ``data/`` (HumanEval-infilling), ``tokenizer.json`` (the base tokenizer, so
the corpus can be built while the base is still uploading), ``recipe.json`` (training config, corpus
recipe, eval plan, code version) and, when asked for, ``align/`` — feedback stores (``--align-feedback``:
the users' prompts and suggestions leave this machine, so only on request) and eval report directories
(``--align-eval``) for the alignment stage's KTO data, ``data/next-edit/cases.jsonl.gz`` (held-out next-edit
cases for the job's in-process next-edit eval, `evals/next_edit.py`, built here by ``python -m evals replay
--build-only``), and ``git/sessions.jsonl.gz`` when the config names
``git_repos`` (`recipe/git_data.py`: extracted here, the config pointed at it). ``base.gguf.xz``: the base
GGUF, xz-compressed (−8 %). Both are cut into ``OUT/upN/`` folders, each ≤ the upload limit minus the working tree (which travels with every
command); every folder carries the full ``manifest.json``.
"""

from __future__ import annotations

import json
import lzma
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

from engine.train.recipe import PART_MAX, ROOT, UPLOAD_LIMIT, MiB
from engine.train.recipe.git_data import stage_git_sessions
from engine.train.recipe.parts import sha256_file, write_part

FORMAT = "edit-server-gpu-recipe/1"
MANIFEST_FORMAT = "edit-server-gpu-pack/1"
CODE_PATHS = ("engine", "evals", "edit_server", "pyproject.toml")  # edit_server: the `align` commands
VENDOR_PKGS = ("gguf",)  # pure Python, not on the GPU image
# the GPU image's CPython (3.12) — tree-sitter has per-version wheels, the grammars are abi3
GPU_PYTHON = "3.12"
GPU_WHEELS = ("tree-sitter==0.26.1", "tree-sitter-python==0.25.0", "tree-sitter-javascript==0.25.0",
              "tree-sitter-typescript==0.23.2", "tree-sitter-rust==0.24.2", "tree-sitter-go==0.25.0",
              "tree-sitter-java==0.23.5", "tree-sitter-c==0.24.2", "tree-sitter-cpp==0.23.4",
              "tree-sitter-lua==0.5.0",
              "msgspec==0.22.0")  # `align measure` reads held-out cases with evals.cases (msgspec)
SOURCES = ("stdlib", "purelib", "platlib")  # resolved by sysconfig on the machine that builds the corpus
MARGIN = 1 * MiB
NEXT_EDIT_CASES = "data/next-edit/cases.jsonl.gz"  # inside the boot bundle
NEXT_EDIT_SESSIONS = "data/next-edit/sessions.jsonl.gz"  # the same repositories' sessions, for `engine.train.edit_tokens`


def tree_bytes(root: Path = ROOT) -> int:
    """Bytes of the working tree that travels with every device command (tracked + untracked, not ignored)."""
    try:
        out = subprocess.run(["git", "-C", str(root), "ls-files", "-co", "--exclude-standard", "-z"],
                             capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return sum(p.stat().st_size for p in root.rglob("*") if p.is_file() and ".git" not in p.parts)
    return sum((root / n).stat().st_size for n in out.decode().split("\0") if n and (root / n).is_file())


def code_files(root: Path = ROOT) -> list[str]:
    try:
        out = subprocess.run(["git", "-C", str(root), "ls-files", "-co", "--exclude-standard", "-z", "--",
                              *CODE_PATHS], capture_output=True, check=True).stdout.decode().split("\0")
    except (OSError, subprocess.CalledProcessError):
        out = [str(p.relative_to(root)) for c in CODE_PATHS for p in (root / c).rglob("*") if p.is_file()]
    return sorted(n for n in out if n and (root / n).is_file() and "__pycache__" not in n
                  and not n.startswith("engine/weights/") and not n.endswith((".pyc", ".gguf")))


def code_version(root: Path = ROOT) -> dict[str, Any]:
    def git(*a: str) -> str:
        try:
            return subprocess.run(["git", "-C", str(root), *a], capture_output=True, text=True).stdout.strip()
        except OSError:
            return ""
    return {"commit": git("rev-parse", "HEAD"), "dirty": bool(git("status", "--porcelain", "--", *CODE_PATHS))}


def fetch_wheels(dest: Path, wheels: tuple[str, ...] = GPU_WHEELS, python: str = GPU_PYTHON) -> list[Path]:
    """``pip download`` the GPU's wheels into ``dest`` (skipped when already there)."""
    have = list(dest.glob("*.whl")) if dest.is_dir() else []
    if len(have) >= len(wheels):
        return sorted(have)
    plats = [a for p in ("manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64",
                         "manylinux1_x86_64", "manylinux_2_5_x86_64") for a in ("--platform", p)]
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
                    "--python-version", python, "--implementation", "cp", *plats, "-d", str(dest), *wheels],
                   check=True)
    return sorted(dest.glob("*.whl"))


def base_tokenizer(gguf: Path) -> tuple[str, str]:
    """(tokenizer.json text, eos token) of the base, read from the GGUF's metadata only."""
    from gguf import GGUFReader

    from engine.loading.gguf_file import gguf_tokenizer

    tok = gguf_tokenizer(GGUFReader(str(gguf)), gguf)
    return tok.hf.to_str(), tok.token_text(tok.special.eos)


def compress(src: Path, cache: Path) -> tuple[Path, str]:
    """xz copy of ``src`` (cached by its sha256); returns (path, sha256 of ``src``)."""
    raw = sha256_file(src)
    out = cache / f"{raw[:16]}.{src.name}.xz"
    if not out.is_file():
        cache.mkdir(parents=True, exist_ok=True)
        tmp = out.with_suffix(".tmp")
        with open(src, "rb") as f, lzma.open(tmp, "wb", preset=6) as z:
            shutil.copyfileobj(f, z, MiB)
        tmp.replace(out)
    return out, raw


def make_recipe(config: dict[str, Any], *, sources: list[str], corpus_options: dict[str, Any],
                tokenizer: dict[str, Any], base: dict[str, Any] | None, eval_splits: list[str],
                eval_limit: int, next_edit: bool = False, edit_tokens: bool = False) -> dict[str, Any]:
    ev: dict[str, Any] = {"splits": eval_splits, "limit": eval_limit}
    if next_edit:
        ev["next_edit"] = NEXT_EDIT_CASES
    if edit_tokens:
        ev["edit_tokens"] = NEXT_EDIT_SESSIONS
    return {"format": FORMAT, "config": config, "corpus": {"sources": sources, "options": corpus_options},
            "tokenizer": tokenizer, "base": base, "eval": ev,
            "code": code_version(), "packed": time.strftime("%Y-%m-%dT%H:%M:%S%z")}


def stage_align_inputs(stage: Path, feedback: list[Path], evals: list[Path]) -> None:
    """``align/feedback/NN-NAME.sqlite3`` (a consistent copy: sqlite's backup, the server may be writing) and
    ``align/eval/NN-NAME/`` (eval report directories)."""
    import sqlite3

    for i, db in enumerate(feedback):
        dest = stage / "align" / "feedback" / f"{i:02d}-{Path(db).stem}.sqlite3"
        dest.parent.mkdir(parents=True, exist_ok=True)
        src = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
        out = sqlite3.connect(dest)
        try:
            src.backup(out)
        finally:
            src.close()
            out.close()
    for i, run in enumerate(evals):
        shutil.copytree(run, stage / "align" / "eval" / f"{i:02d}-{Path(run).name}")


def build_next_edit_cases(repos: list[Path], out: Path, per_repo: int) -> Path:
    """Held-out next-edit cases (``python -m evals replay REPOS --build-only``: a subprocess, the recipe does
    not import evals), gzipped to ``out``."""
    import gzip

    with tempfile.TemporaryDirectory(prefix="next-edit-") as tmp:
        subprocess.run([sys.executable, "-m", "evals", "replay", *map(str, repos), "--build-only",
                        "--cases-per-repo", str(per_repo), "--out", tmp, "--no-progress"], check=True,
                       stdout=subprocess.DEVNULL, cwd=ROOT)
        out.parent.mkdir(parents=True, exist_ok=True)
        with open(Path(tmp) / "cases.jsonl", "rb") as f, gzip.open(out, "wb") as z:
            shutil.copyfileobj(f, z)
    return out


def make_boot(path: Path, recipe: dict[str, Any], *, tokenizer_json: str | None, wheels: list[Path],
              data: Path | None, align_feedback: list[Path] | None = None,
              align_eval: list[Path] | None = None, next_edit_cases: Path | None = None,
              next_edit_sessions: Path | None = None) -> Path:
    with tempfile.TemporaryDirectory(prefix="boot-") as tmp:
        stage = Path(tmp)
        stage_align_inputs(stage, list(align_feedback or []), list(align_eval or []))
        recipe = {**recipe, "config": stage_git_sessions(recipe["config"], stage)}  # git_repos → git/
        for n in code_files():
            (stage / "code" / n).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / n, stage / "code" / n)
        for name in VENDOR_PKGS:
            try:
                mod = __import__(name)
            except ImportError:
                continue
            shutil.copytree(Path(mod.__file__).parent, stage / "vendor" / name,
                            ignore=shutil.ignore_patterns("__pycache__", "*.so"))
        for w in wheels:
            (stage / "wheels").mkdir(exist_ok=True)
            shutil.copy2(w, stage / "wheels" / w.name)
        if data is not None and data.is_dir():
            shutil.copytree(data, stage / "data" / data.name)
        if next_edit_cases is not None:
            (stage / NEXT_EDIT_CASES).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(next_edit_cases, stage / NEXT_EDIT_CASES)
        if next_edit_sessions is not None:
            (stage / NEXT_EDIT_SESSIONS).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(next_edit_sessions, stage / NEXT_EDIT_SESSIONS)
        if tokenizer_json is not None:
            (stage / "tokenizer.json").write_text(tokenizer_json)
        (stage / "recipe.json").write_text(json.dumps(recipe, indent=1))
        with tarfile.open(path, "w:xz") as tar:
            for p in sorted(stage.iterdir()):
                tar.add(p, arcname=p.name)
    return path


def plan_uploads(files: list[tuple[str, Path]], capacity: int, part_max: int = PART_MAX, *,
                 whole_first: bool = True) -> list[list[tuple[str, int, int]]]:
    """Uploads, each a list of (file name, offset, size) ≤ ``capacity`` in all; the first file whole (the
    boot bundle: the job starts from it) unless not ``whole_first``."""
    uploads: list[list[tuple[str, int, int]]] = [[]]
    room = capacity
    for i, (name, path) in enumerate(files):
        size, offset = path.stat().st_size, 0
        if i == 0 and whole_first and size > capacity:
            raise ValueError(f"{name} ({size / MiB:.1f} MiB) does not fit in one upload ({capacity / MiB:.1f} MiB)")
        while offset < size or (size == 0 and offset == 0):
            if room <= 0:
                uploads.append([])
                room = capacity
            n = min(size - offset, room, part_max)
            uploads[-1].append((name, offset, n))
            offset, room = offset + n, room - n
            if size == 0:
                break
    return uploads


def pack(out: Path, config: dict[str, Any], *, base: Path | None, wheels: list[Path],
         sources: list[str] | None = None, corpus_options: dict[str, Any] | None = None,
         eval_splits: list[str] | None = None, eval_limit: int = 100, data: Path | None = None,
         upload_limit: int = UPLOAD_LIMIT, tree: int | None = None, margin: int = MARGIN,
         part_max: int = PART_MAX, align_feedback: list[Path] | None = None,
         align_eval: list[Path] | None = None, base_raw: dict[str, Any] | None = None,
         next_edit_cases: Path | None = None, next_edit_sessions: Path | None = None) -> dict[str, Any]:
    """Write ``out/boot.tar.xz`` (+ ``out/base.gguf.xz``) and ``out/upN/``; returns the upload plan.
    ``next_edit_cases``: a gzipped ``cases.jsonl`` (`build_next_edit_cases`) for the job's next-edit eval;
    ``next_edit_sessions``: the same repositories' sessions (`git_data.build_heldout_sessions`) for its
    edit-tokens eval.
    ``base_raw``: the base goes up uncompressed with these manifest fields (a parted base's tied-output
    copy, `recipe.base_parts.base_entry`: 346 MB that xz would shrink by a few percent in minutes)."""
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("up*"):
        shutil.rmtree(old)
    tok_json, tok = None, {"byte": True}
    base_info = None
    files: list[tuple[str, Path]] = []
    extra: dict[str, dict[str, Any]] = {}
    if base is not None:
        tok_json, eos = base_tokenizer(base)
        tok = {"file": "tokenizer.json", "eos": eos}
        if base_raw is not None:
            base_name, xz, raw = base.name, base, base_raw["raw_sha256"]
            extra[base_name] = base_raw
        else:
            base_name = "base.gguf.xz"
            xz, raw = compress(base, out / "cache")
            extra[base_name] = {"install": "base", "raw_name": base.name, "raw_sha256": raw,
                                "raw_size": base.stat().st_size}
        base_info = {"name": base.name, "sha256": raw}
    recipe = make_recipe(config, sources=list(sources or SOURCES), corpus_options=corpus_options or {},
                         tokenizer=tok, base=base_info, eval_splits=list(eval_splits or ["single-line"]),
                         eval_limit=eval_limit, next_edit=next_edit_cases is not None,
                         edit_tokens=next_edit_sessions is not None)
    files.append(("boot.tar.xz", make_boot(out / "boot.tar.xz", recipe, tokenizer_json=tok_json,
                                           wheels=wheels, data=data, align_feedback=align_feedback,
                                           align_eval=align_eval, next_edit_cases=next_edit_cases,
                                           next_edit_sessions=next_edit_sessions)))
    extra["boot.tar.xz"] = {"install": "boot"}
    if base is not None:
        files.append((base_name, xz))
    tree = tree_bytes() if tree is None else tree
    room = capacity(tree, upload_limit, margin)
    manifest = write_uploads(out, files, extra, room, part_max=part_max,
                             recipe={k: recipe[k] for k in ("code", "packed", "base")})
    rel = out.relative_to(ROOT) if out.is_relative_to(ROOT) else out
    ups: list[dict[str, Any]] = [{"carry": f"{rel}/up{u}", "bytes": 0, "files": set()}
                                 for u in range(1, manifest["uploads"] + 1)]
    for e in manifest["files"]:
        for p in e["parts"]:
            ups[p["upload"] - 1]["bytes"] += p["size"]
            ups[p["upload"] - 1]["files"].add(e["name"])
    return {"tree_bytes": tree, "capacity": room, "uploads": [{**u, "files": sorted(u["files"])} for u in ups]}


def capacity(tree: int, upload_limit: int = UPLOAD_LIMIT, margin: int = MARGIN) -> int:
    room = upload_limit - tree - margin
    if room <= 0:
        raise ValueError(f"the working tree ({tree / MiB:.1f} MiB) leaves no room in a {upload_limit / MiB:.0f} "
                         "MiB upload")
    return room


def write_uploads(out: Path, files: list[tuple[str, Path]], extra: dict[str, dict[str, Any]], room: int, *,
                  part_max: int = PART_MAX, recipe: dict[str, Any] | None = None,
                  whole_first: bool = True) -> dict[str, Any]:
    """Cut ``files`` (in order; the first whole unless not ``whole_first``) into ``out/upN/`` folders of ≤ ``room`` bytes, a sha256
    per part and per file, the same ``manifest.json`` in each. Returns the manifest."""
    uploads = plan_uploads(files, room, part_max, whole_first=whole_first)
    paths = dict(files)
    entries: dict[str, dict[str, Any]] = {name: {"name": name, "size": p.stat().st_size, "sha256": sha256_file(p),
                                                 "parts": [], **extra[name]} for name, p in files}
    for u, items in enumerate(uploads, 1):
        for name, offset, size in items:
            k = len(entries[name]["parts"])
            part = write_part(paths[name], offset, size, out / f"up{u}" / f"{name}.part{k:03d}")
            entries[name]["parts"].append({**part, "upload": u})
    manifest = {"format": MANIFEST_FORMAT, "files": list(entries.values()), "uploads": len(uploads),
                "recipe": recipe or {}}
    for u in range(1, len(uploads) + 1):
        (out / f"up{u}" / "manifest.json").write_text(json.dumps(manifest, indent=1))
    return manifest
