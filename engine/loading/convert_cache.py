"""Keep a safetensors copy of a converted GGUF next to it, so later loads skip GGUF parsing.

Parsing the base GGUF (49k-token vocab + merges) and dequantizing takes 7-25 s on the 2-core CPU;
the converted copy (``<stem>.converted/``: an `engine.loading.export` directory + ``stamp.json``)
loads in about a second. The stamp records the GGUF's name, size and mtime and a format version;
any mismatch (or an unreadable copy) converts again. Written into a temp dir and renamed, so a
crash leaves no half-written copy. Used automatically for GGUF files in the base cache directory.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import torch

from engine.checkpoint import LoadedCheckpoint
from engine.loading.common import CheckpointError

log = logging.getLogger(__name__)

VERSION = 1
STAMP = "stamp.json"


def converted_dir(path: Path) -> Path:
    return path.with_name(path.stem + ".converted")


def _key(path: Path) -> dict[str, Any]:
    st = path.stat()
    return {"version": VERSION, "source": path.name, "size": st.st_size, "mtime_ns": st.st_mtime_ns}


def _cast(ck: LoadedCheckpoint, dtype: torch.dtype | None) -> LoadedCheckpoint:
    if dtype is not None:
        ck.state_dict = {k: v.to(dtype) for k, v in ck.state_dict.items()}
    return ck


def load_gguf_cached(path: str | Path, dtype: torch.dtype | None = None) -> LoadedCheckpoint:
    from engine.loading.export import save_hf
    from engine.loading.gguf_file import load_gguf
    from engine.loading.hf import load_hf

    path = Path(path)
    out = converted_dir(path)
    key = _key(path)
    try:
        stamp = json.loads((out / STAMP).read_text())
        if stamp.get("key") == key:
            ck = load_hf(out, dtype=dtype)
            ck.name = stamp["name"]
            ck.meta = {**stamp["meta"], "converted": str(out)}
            return ck
    except FileNotFoundError:
        pass
    except (CheckpointError, json.JSONDecodeError, KeyError, OSError) as e:
        log.warning("%s: unusable converted copy (%s); converting again", out, e)
    ck = load_gguf(path)
    tmp = Path(tempfile.mkdtemp(prefix=".converting-", dir=path.parent))
    try:
        save_hf(ck, tmp, max_shard_bytes=1 << 40)
        (tmp / STAMP).write_text(json.dumps({"key": key, "name": ck.name, "meta": ck.meta}, default=str))
        if out.exists():
            shutil.rmtree(out)
        os.replace(tmp, out)
        log.info("cached the converted checkpoint at %s", out)
    except OSError as e:  # read-only cache, disk full, a concurrent writer: just load without caching
        log.warning("could not cache the converted checkpoint at %s: %s", out, e)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return _cast(ck, dtype)
