"""The default model, merged and quantised once, kept on disk for the next start.

Building the CPU model costs, every start: parsing the base (or its converted copy), merging the
LoRA adapter into 135 M weights, then quantising them to int8 (`engine.cpu.fastcpu`) — seconds on a
2-core CPU and a peak of ~1.5 GB (fp32 copies). The result is small (int8, ~150 MB), so it is saved
as one safetensors file plus a JSON sidecar (model args, tokenizer, provenance) under
``~/.cache/edit-server/merged/`` and loaded from there next time: no merge, no quantisation, no
fp32 copy. The file name carries a key of everything it was built from (adapter files, base file,
format versions); anything else is a miss. Small sources (an adapter) are keyed by their content, so two
checkouts of the same adapter (worktrees, a fresh clone: other paths and mtimes) share one entry; large
ones (a base GGUF in the shared cache) by name, size and mtime. The ``KEEP`` most recently used entries
of a name stay: a benchmark or evaluation that alternates two adapters (``bench lsp --adapter``) used to
evict the other's entry at every start, so every start rebuilt it (peak RSS 1.6 GB instead of ~0.9 GB).
An entry's int4 copy of the MLP and LM-head weights (`engine.cpu.fastcpu.attach_int4`, packed from its int8
ones) is kept beside it (``<entry>.int4g<group>.safetensors``, written at the first load that packs it, removed
with it).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import re
import tempfile
from pathlib import Path
from typing import Any

import torch

from engine import options
from engine.checkpoint import LoadedCheckpoint
from engine.config import ModelArgs

log = logging.getLogger(__name__)

VERSION = 1
KEEP = 3  # entries kept per name, most recently used first
CONTENT_KEY_MAX = 64 << 20  # sources up to this size are keyed by their sha256, larger ones by stat
ENV_DIR = options.MERGED_CACHE  # a directory, or "off"


def cache_dir() -> Path | None:
    o = options.env()
    if o.merged_cache == "off":
        return None
    if o.merged_cache:
        return Path(o.merged_cache)
    return o.cache_home() / "edit-server" / "merged"


def _stat(path: Path) -> dict[str, Any]:
    st = path.stat()
    if st.st_size <= CONTENT_KEY_MAX:
        from engine.loading.base import sha256_file

        return {"name": path.name, "size": st.st_size, "sha256": sha256_file(path)}
    return {"name": path.name, "size": st.st_size, "mtime_ns": st.st_mtime_ns}


def key(sources: list[Path], layout: str) -> str:
    """Hash of the source files' identity (name, size and content hash, or mtime past
    ``CONTENT_KEY_MAX``), the layout and this module's version."""
    from engine.cpu import fastcpu

    ident = {"version": VERSION, "layout": layout, "fastcpu": fastcpu.FORMAT,
             "torch": ".".join(torch.__version__.split(".")[:2]),
             "sources": [_stat(p) for p in sources]}
    return hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()[:20]


def paths(name: str, k: str) -> tuple[Path, Path] | None:
    d = cache_dir()
    if d is None:
        return None
    return d / f"{name}-{k}.safetensors", d / f"{name}-{k}.json"


def load(name: str, k: str) -> LoadedCheckpoint | None:
    """The cached checkpoint (state dict in its saved layout), or None on a miss / unreadable entry."""
    where = paths(name, k)
    if where is None or not where[0].is_file() or not where[1].is_file():
        return None
    try:
        from safetensors.torch import load_file
        from tokenizers import Tokenizer as HFTokenizer

        from engine.tokenizer import Tokenizer
        from engine.tokens import SpecialIds

        side = json.loads(where[1].read_text(encoding="utf-8"))
        # fresh (allocator-aligned) copies: tensors at arbitrary file offsets crash the int8 kernel
        state = {n: t.clone() for n, t in load_file(str(where[0])).items()}
        args = ModelArgs.from_dict(side["args"])
        tok = Tokenizer(HFTokenizer.from_str(side["tokenizer"]),
                        SpecialIds.from_mapping(side["special_tokens"], source=str(where[1])))
        meta = {**side["meta"], "merged_cache": str(where[0])}
        for p in where:  # most recently used: the last to go (``save`` keeps ``KEEP`` of them)
            os.utime(p)
        return LoadedCheckpoint(args, state, tok, side["name"], meta)
    except Exception as e:  # noqa: BLE001 - a broken entry is rebuilt, never fatal
        log.warning("merged-model cache %s unreadable (%s); rebuilding it", where[0], e)
        return None


def _evict(d: Path, name: str) -> None:
    """Remove ``name``'s entries (safetensors + sidecar) past the ``KEEP`` most recently used."""
    mine = [p for p in d.glob(f"{name}-*.safetensors") if re.fullmatch(r"[0-9a-f]{20}", p.stem[len(name) + 1:])]
    entries = sorted(mine, key=lambda p: p.stat().st_mtime_ns, reverse=True)
    for old in entries[KEEP:]:
        old.unlink(missing_ok=True)
        old.with_suffix(".json").unlink(missing_ok=True)
        for extra in d.glob(f"{old.stem}.int4g*.safetensors"):
            extra.unlink(missing_ok=True)


def save(name: str, k: str, ck: LoadedCheckpoint) -> Path | None:
    """Write ``ck`` (atomically: temp files renamed) and drop ``name``'s entries past the ``KEEP`` most
    recently used."""
    where = paths(name, k)
    if where is None:
        return None
    from safetensors.torch import save_file

    d = where[0].parent
    try:
        d.mkdir(parents=True, exist_ok=True)
        side = {"name": ck.name, "args": dataclasses.asdict(ck.args), "special_tokens": ck.tokenizer.special.as_dict(),
                "tokenizer": ck.tokenizer.hf.to_str(), "meta": ck.meta}
        with tempfile.TemporaryDirectory(prefix=".tmp-", dir=d) as tmp:
            st, js = Path(tmp) / where[0].name, Path(tmp) / where[1].name
            save_file({n: t.contiguous() for n, t in ck.state_dict.items()}, str(st))
            js.write_text(json.dumps(side, default=str), encoding="utf-8")
            os.replace(st, where[0])
            os.replace(js, where[1])
        _evict(d, name)
        return where[0]
    except OSError as e:
        log.warning("could not write the merged-model cache in %s: %s", d, e)
        return None


def int4_path(entry: Path, group: int) -> Path:
    return entry.with_name(f"{entry.stem}.int4g{group}.safetensors")


def attach_int4(model: torch.nn.Module, entry: str | Path | None) -> int:
    """`fastcpu.attach_int4` with the int4 copy kept beside the merged-model cache ``entry`` (the file the
    model was loaded from; None: packed, not kept): loaded when there, else packed and written (atomically;
    a failed write only logs). Returns how many matrices got an int4 copy."""
    from safetensors.torch import load_file, save_file

    from engine.cpu import fastcpu

    if entry is None:
        return fastcpu.attach_int4(model)
    where = int4_path(Path(entry), fastcpu.INT4_GROUP)
    packed = None
    if where.is_file():
        try:
            packed = {n: t.clone() for n, t in load_file(str(where)).items()}  # aligned copies, as `load`
        except Exception as e:  # noqa: BLE001 - a broken copy is packed again
            log.warning("int4 copy %s unreadable (%s); packing it again", where, e)
    n = fastcpu.attach_int4(model, packed=packed)
    state = fastcpu.int4_state(model)
    if n and (packed is None or set(packed) != set(state)):
        try:
            with tempfile.TemporaryDirectory(prefix=".tmp-", dir=where.parent) as tmp:
                t = Path(tmp) / where.name
                save_file(state, str(t))
                os.replace(t, where)
        except OSError as e:
            log.warning("could not keep the int4 copy at %s: %s", where, e)
    return n
