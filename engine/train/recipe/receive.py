"""The GPU side's uploads: take the parts of the upload folders and install each file once all its parts are
there — the boot bundle (code, vendored packages, wheels, data) or a base model (xz-compressed, or parted
without its tied output). A part that is not the manifest's is named and refused."""

from __future__ import annotations

import json
import lzma
import os
import shutil
import tarfile
import time
import zipfile
from pathlib import Path
from typing import Any

from engine.train.recipe import MiB
from engine.train.recipe.parts import check_part, copy_parts, join, missing, sha256_file
from engine.train.recipe.workdir import RecipeError, Work, alive, read_json, write_json


def receive(work: Path, dirs: list[Path]) -> dict[str, Any]:
    """Take the parts of the given upload folders; install every file whose parts are all here."""
    w = Work(work)
    manifest = None
    got: list[str] = []
    damaged: list[str] = []  # parts that came but are not the manifest's (size or sha256): named, not taken
    for d in dirs:
        manifest = json.loads((Path(d) / "manifest.json").read_text())
        for e in manifest["files"]:
            if not _marker(w, e).is_file():
                took = copy_parts(Path(d), w.parts, e)
                got += took
                damaged += [why for p in e["parts"] if p["name"] not in took and (Path(d) / p["name"]).is_file()
                            and (why := check_part(Path(d) / p["name"], p))]
        write_json(w.parts / "manifest.json", manifest)
    manifest = manifest or read_json(w.parts / "manifest.json")
    if manifest is None:
        raise RecipeError(f"nothing received in {w.parts} yet (pass the upload folders)")
    installed, waiting = [], []
    for e in manifest["files"]:
        marker = _marker(w, e)
        if marker.is_file():
            installed.append(e["name"])
            continue
        lack = missing(w.parts, e, verify=False)
        if lack:
            waiting.append({"file": e["name"], "parts": len(e["parts"]), "missing": len(lack),
                            "uploads": sorted({p["upload"] for p in e["parts"]})})
            continue
        if e["install"] == "boot" and alive((read_json(w.job) or {}).get("pid")):
            raise RecipeError("a job is running from the installed boot bundle: `stop` it before a new pack")
        joined = join(w.parts, e, w.root / "incoming" / e["name"])
        _install(w, e, joined)
        marker.write_text(time.strftime("%Y-%m-%dT%H:%M:%S"))
        joined.unlink(missing_ok=True)  # an uncompressed base was moved into the cache
        for p in e["parts"]:
            (w.parts / p["name"]).unlink(missing_ok=True)
        installed.append(e["name"])
    if damaged:
        raise RecipeError("damaged parts refused (upload them again): " + "; ".join(damaged))
    return {"received": got, "installed": installed, "waiting": waiting, "work": str(w.root)}


def _marker(w: Work, entry: dict[str, Any]) -> Path:
    return w.root / f".installed-{entry['name']}-{entry['sha256'][:16]}"


def _install(w: Work, entry: dict[str, Any], path: Path) -> None:
    if entry["install"] == "boot":
        if w.boot.exists():
            shutil.rmtree(w.boot)
        with tarfile.open(path, "r:xz") as tar:
            tar.extractall(w.boot, **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
        for wheel in sorted((w.boot / "wheels").glob("*.whl")):
            with zipfile.ZipFile(wheel) as z:  # a wheel is a zip of its site-packages files
                z.extractall(w.boot / "site")
    elif entry["install"] == "base" and entry.get("compressed") is False:  # a tied-output parted base
        from engine.train.recipe.base_parts import install_base

        install_base(entry, path, vendor=w.boot / "vendor")
    elif entry["install"] == "base":
        from engine.loading.base import default_cache_dir

        target = default_cache_dir() / entry["raw_name"]
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(target.name + ".unpacking")
        with lzma.open(path, "rb") as z, open(tmp, "wb") as f:
            shutil.copyfileobj(z, f, MiB)
        if sha256_file(tmp) != entry["raw_sha256"]:
            tmp.unlink()
            raise RecipeError(f"{entry['raw_name']}: sha256 mismatch after decompression")
        os.replace(tmp, target)
    else:
        raise RecipeError(f"{entry['name']}: unknown install kind {entry['install']!r}")
