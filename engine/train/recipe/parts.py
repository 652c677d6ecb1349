"""Files cut into parts with a sha256 per part and per file, and joined back only when every hash matches.

A manifest entry is ``{"name", "size", "sha256", "parts": [{"name", "offset", "size", "sha256"}]}``;
parts are byte ranges, so a file can be cut to fit whatever room each upload has. Standard library only.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from collections.abc import Iterable
from pathlib import Path
from typing import Any

CHUNK = 1 << 20


class PartsError(RuntimeError):
    """A part is missing or damaged, or a joined file does not match its manifest."""


def sha256_file(path: Path, offset: int = 0, size: int | None = None) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        f.seek(offset)
        left = size
        while left is None or left > 0:
            block = f.read(CHUNK if left is None else min(CHUNK, left))
            if not block:
                break
            h.update(block)
            left = None if left is None else left - len(block)
    return h.hexdigest()


def cut(sizes: Iterable[int], size: int) -> list[tuple[int, int]]:
    """(offset, size) ranges of a file of ``size`` bytes for successive room ``sizes`` (≥ 1 range)."""
    out: list[tuple[int, int]] = []
    offset = 0
    for room in sizes:
        if offset >= size and out:
            break
        n = min(room, size - offset)
        out.append((offset, n))
        offset += n
    if offset < size:
        raise ValueError(f"{size - offset} bytes left over after the given part sizes")
    return out


def write_part(src: Path, offset: int, size: int, dest: Path) -> dict[str, Any]:
    dest.parent.mkdir(parents=True, exist_ok=True)
    h = hashlib.sha256()
    with open(src, "rb") as f, open(dest, "wb") as out:
        f.seek(offset)
        left = size
        while left:
            block = f.read(min(CHUNK, left))
            if not block:
                raise PartsError(f"{src}: shorter than expected")
            h.update(block)
            out.write(block)
            left -= len(block)
    return {"name": dest.name, "offset": offset, "size": size, "sha256": h.hexdigest()}


def split(src: Path, out: Path, max_part: int, name: str | None = None) -> dict[str, Any]:
    """Cut ``src`` into ``out/<name>.partNNN`` of ≤ ``max_part`` bytes; returns the manifest entry."""
    name = name or src.name
    size = src.stat().st_size
    ranges = cut(iter(lambda: max_part, None), size)
    parts = [write_part(src, o, n, out / f"{name}.part{k:03d}") for k, (o, n) in enumerate(ranges)]
    return {"name": name, "size": size, "sha256": sha256_file(src), "parts": parts}


def check_part(path: Path, part: dict[str, Any]) -> str | None:
    """None if ``path`` is the part, else why not."""
    if not path.is_file():
        return f"{path}: missing"
    if path.stat().st_size != part["size"]:
        return f"{path}: size {path.stat().st_size} bytes, the manifest's size is {part['size']}"
    got = sha256_file(path)
    if got != part["sha256"]:
        return f"{path}: sha256 {got[:16]}… is not the manifest's sha256 {part['sha256'][:16]}… (damaged in transfer?)"
    return None


def missing(d: Path, entry: dict[str, Any], *, verify: bool = True) -> list[str]:
    """Parts of ``entry`` not (or not intact) in ``d``."""
    out = []
    for p in entry["parts"]:
        why = check_part(d / p["name"], p) if verify else (None if (d / p["name"]).is_file() else "missing")
        if why:
            out.append(why)
    return out


def join(d: Path, entry: dict[str, Any], dest: Path) -> Path:
    """Join the parts of ``entry`` found in ``d`` into ``dest`` (atomic; checks every hash)."""
    bad = missing(d, entry)
    if bad:
        raise PartsError("; ".join(bad))
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(dest.name + f".{os.getpid()}.joining")
    h = hashlib.sha256()
    try:
        with open(tmp, "wb") as out:
            for p in sorted(entry["parts"], key=lambda p: p["offset"]):
                with open(d / p["name"], "rb") as f:
                    while block := f.read(CHUNK):
                        h.update(block)
                        out.write(block)
        if h.hexdigest() != entry["sha256"]:
            raise PartsError(f"{entry['name']}: joined sha256 {h.hexdigest()[:16]}… does not match the "
                             f"manifest's {entry['sha256'][:16]}…")
        os.replace(tmp, dest)
    finally:
        tmp.unlink(missing_ok=True)
    return dest


def copy_parts(src: Path, dest: Path, entry: dict[str, Any]) -> list[str]:
    """Copy the intact parts of ``entry`` present in ``src`` to ``dest``; returns their names."""
    dest.mkdir(parents=True, exist_ok=True)
    got = []
    for p in entry["parts"]:
        if (src / p["name"]).is_file() and check_part(src / p["name"], p) is None:
            if check_part(dest / p["name"], p) is not None:
                shutil.copyfile(src / p["name"], dest / p["name"])
            got.append(p["name"])
    return got
