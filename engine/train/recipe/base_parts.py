"""`base-parts` (here): a parted base without its output tensor, in upload folders that fit beside the tree.

Qwen2.5-Coder-0.5B's GGUF (491 MB) holds ``output.weight`` (Q8_0, 145 MB), a higher-precision copy of
the token embedding its HF checkpoint ties. The GPU recipe trains with the output tied
(`engine.loading.tied`), so the upload drops it: `write_tied` copies every metadata field and every
other tensor byte for byte with gguf's writer, adds ``edit_server.derived_from.{file,sha256,dropped}``
(the pinned file's sha256), and `check_tied` reads it back (architecture, block count, the tensor list
without ``output.weight``, each tensor's type and bytes equal to the source's). The result is cached
beside the pinned file (``<stem>.tied-output.gguf`` + ``.json``: source sha256, size, sha256).

The upload folders (`base_parts`, or `pack` for a whole window) are each ≤ the per-command limit minus the
working tree that travels with every command — measured with git, less the paths a window moves out of the
tree first (`HOLD`: the kept SmolLM2 checkpoint and the shipped adapter, which a Qwen window does not
use) — with a sha256 per part and per file and the same manifest in every folder (``install: base``,
``compressed: false``). On the GPU, `gpu_recipe receive` joins, verifies every hash and the header (with
the boot bundle's vendored gguf: the image has none) and only then moves the file into the base cache.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from engine.loading.base import PartedBase, check_gguf_header, default_cache_dir, fetch_parted, parted_base
from engine.loading.tied import DROPPED, FROM_FILE, FROM_SHA256, OUTPUT, tied_name, tied_spec
from engine.train.recipe import KEEP_PREFIX, PART_MAX, ROOT, UPLOAD_LIMIT
from engine.train.recipe.pack import MARGIN as MARGIN
from engine.train.recipe.pack import capacity, tree_bytes, write_uploads
from engine.train.recipe.parts import sha256_file

# moved out of the working tree for a window that does not use them (`plan` prints the mv commands)
HOLD = ("engine/weights/gpu-ckpt", "engine/weights/default.safetensors")
HOLD_DIR = "../edit-server-window-hold"


def kept_bases(root: Path = ROOT) -> tuple[str, ...]:
    """The parted bases' kept checkpoints in the tree (``engine/weights/gpu-ckpt-<base>``, `recipe.keep_dir`).
    Every window moves them out of the tree (a Qwen checkpoint is ~36 MiB: with every upload it would leave
    no room); the window that continues one carries a copy once (``.devcarry/resume``)."""
    weights = root / "engine" / "weights"
    return tuple(sorted(f"engine/weights/{p.name}" for p in weights.glob(f"{KEEP_PREFIX}*") if p.is_dir()))


def shipped_parted(root: Path = ROOT) -> tuple[str, ...]:
    """The shipped adapters of parted-base tiers in the tree (`engine.tiers.SHIPPED`, e.g.
    ``engine/weights/qwen2_5-coder-0_5b-bd3.safetensors``, 19 MB): no window serves them, so every window
    holds them out (their JSON stays: a few KB)."""
    from engine.tiers import SHIPPED

    return tuple(sorted(f"engine/weights/{s.stem}.safetensors" for s in SHIPPED.values()
                        if s.base is not None and (root / "engine" / "weights" / f"{s.stem}.safetensors").is_file()))


def window_hold(root: Path = ROOT, *, base: bool = True) -> tuple[str, ...]:
    """What a window moves out of the tree first: every kept parted-base checkpoint and shipped parted-base
    adapter, and for a parted base's window (``base``) also `HOLD` (SmolLM2's checkpoint and adapter)."""
    return (HOLD if base else ()) + kept_bases(root) + shipped_parted(root)


def write_tied(src: Path, dest: Path, spec: PartedBase, *, drop: str = OUTPUT) -> Path:
    """``src`` without tensor ``drop``, every other field and tensor byte for byte (atomic)."""
    from gguf import GGUFReader, GGUFValueType, GGUFWriter

    reader = GGUFReader(str(src))
    names = [t.name for t in reader.tensors]
    if drop not in names:
        raise ValueError(f"{src}: no tensor {drop!r} to drop")
    arch = reader.fields["general.architecture"].contents()
    tmp = dest.with_name(dest.name + f".{os.getpid()}.writing")
    w = GGUFWriter(str(tmp), arch, endianess=reader.endianess)
    try:
        for f in reader.fields.values():
            if f.name == "general.architecture" or f.name.startswith("GGUF."):
                continue  # the writer's own
            vtype = f.types[0]
            w.add_key_value(f.name, f.contents(), vtype, sub_type=f.types[-1] if vtype == GGUFValueType.ARRAY
                            else None)
        w.add_key_value(FROM_FILE, spec.file, GGUFValueType.STRING)
        w.add_key_value(FROM_SHA256, spec.sha256, GGUFValueType.STRING)
        w.add_key_value(DROPPED, drop, GGUFValueType.STRING)
        kept = [t for t in reader.tensors if t.name != drop]
        for t in kept:
            w.add_tensor_info(t.name, t.data.shape, t.data.dtype, t.data.nbytes, t.tensor_type)
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_ti_data_to_file()
        for t in kept:
            w.write_tensor_data(t.data, tensor_endianess=reader.endianess)
        w.close()
        os.replace(tmp, dest)
    finally:
        tmp.unlink(missing_ok=True)
    return dest


def check_tied(path: Path, spec: PartedBase, source: Path | None = None) -> None:
    """The derived file's header: the pinned architecture, block count and tensor list less the output,
    and its provenance fields; with ``source``, every tensor's type and bytes equal to the source's."""
    from gguf import GGUFReader

    check_gguf_header(path, tied_spec(spec))
    r = GGUFReader(str(path))
    got = {k: (r.fields[k].contents() if k in r.fields else None) for k in (FROM_SHA256, DROPPED)}
    if got != {FROM_SHA256: spec.sha256, DROPPED: OUTPUT}:
        raise ValueError(f"{path.name}: provenance fields {got}, expected {FROM_SHA256}={spec.sha256[:16]}… "
                         f"{DROPPED}={OUTPUT}")
    if source is not None:
        ref = {t.name: t for t in GGUFReader(str(source)).tensors}
        for t in r.tensors:
            s = ref[t.name]
            if t.tensor_type != s.tensor_type or t.data.tobytes() != s.data.tobytes():
                raise ValueError(f"{path.name}: tensor {t.name!r} differs from {source.name}'s")


def tied_base(name: str, cache_dir: Path | None = None, *, source: Path | None = None) -> dict[str, Any]:
    """The cached tied-output copy of parted base ``name`` (written from the pinned file on first use):
    ``{"path", "size", "sha256", "from_sha256", "seconds"}`` (a ``.json`` beside it records them)."""
    spec = parted_base(name)
    cache = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    dest = cache / tied_name(spec)
    stamp = dest.with_suffix(".json")
    try:
        info = json.loads(stamp.read_text())
        if dest.is_file() and info["size"] == dest.stat().st_size and info["from_sha256"] == spec.sha256:
            return {**info, "path": str(dest), "seconds": 0.0}
    except (OSError, ValueError, KeyError):
        pass
    t0 = time.time()
    src = source or fetch_parted(spec, cache)
    write_tied(src, dest, spec)
    check_tied(dest, spec, source=src)
    info = {"file": dest.name, "size": dest.stat().st_size, "sha256": sha256_file(dest),
            "from_sha256": spec.sha256, "from_size": spec.size, "dropped": OUTPUT}
    stamp.write_text(json.dumps(info, indent=1))
    return {**info, "path": str(dest), "seconds": round(time.time() - t0, 1)}


def window_tree_bytes(root: Path = ROOT, hold: tuple[str, ...] | None = None) -> int:
    """The working tree's bytes during a window that moved ``hold`` (default: `window_hold`) out first
    (measured with git)."""
    hold = window_hold(root) if hold is None else hold
    held = 0
    for h in hold:
        p = root / h
        held += sum(q.stat().st_size for q in p.rglob("*") if q.is_file()) if p.is_dir() else \
            (p.stat().st_size if p.is_file() else 0)
    return tree_bytes(root) - held


def hold_commands(hold: tuple[str, ...] = HOLD, where: str = HOLD_DIR) -> tuple[str, str]:
    """(before the window, after it): shell commands, run in the repository root, that move ``hold`` out of
    the working tree and back; none for none.

    Before: each path moves to ``where`` and leaves git's index too (``git rm --cached``), so the window's
    tree neither holds the files nor lists tracked files that are missing, whichever way the device tool
    enumerates it. After: each moves back and ``git reset`` restores its index entry from HEAD (a held path
    that was never committed stays untracked, as it was); ``git status --short`` then shows what it showed
    before. Commit nothing in between."""
    if not hold:
        return "", ""
    paths = " ".join(hold)
    before = (f"mkdir -p {where} && " + " && ".join(f"mv {h} {where}/" for h in hold)
              + f" && git rm -r -q --cached --ignore-unmatch -- {paths}")
    after = (" && ".join(f"mv {where}/{Path(h).name} {h}" for h in hold)
             + f" && rmdir {where} && git reset -q -- {paths} && git status --short")
    return before, after


def base_entry(name: str, info: dict[str, Any]) -> dict[str, Any]:
    """The manifest fields that make `receive` install a tied base uncompressed into the base cache."""
    spec = parted_base(name)
    return {"install": "base", "compressed": False, "raw_name": info["file"], "raw_sha256": info["sha256"],
            "raw_size": info["size"], "base": spec.name, "tied_output": True}


def base_parts(name: str, out: Path, *, tree: int | None = None, upload_limit: int = UPLOAD_LIMIT,
               part_max: int = PART_MAX, cache_dir: Path | None = None) -> dict[str, Any]:
    """The tied-output base of ``name`` alone in ``out/upN/`` (each ≤ the limit less the window's tree)."""
    import shutil

    info = tied_base(name, cache_dir)
    tree = window_tree_bytes() if tree is None else tree
    room = capacity(tree, upload_limit)
    for old in out.glob("up*"):
        shutil.rmtree(old)
    man = write_uploads(out, [(info["file"], Path(info["path"]))], {info["file"]: base_entry(name, info)}, room,
                        part_max=part_max, recipe={"base": {"name": info["file"], "sha256": info["sha256"]}},
                        whole_first=False)
    return {"base": info, "tree_bytes": tree, "capacity": room, "uploads": [
        {"dir": str(out / f"up{u}"), "bytes": sum(p["size"] for e in man["files"] for p in e["parts"]
                                                  if p["upload"] == u)} for u in range(1, man["uploads"] + 1)]}


def install_base(entry: dict[str, Any], joined: Path, vendor: Path | None = None) -> Path:
    """GPU side: a joined (hash-checked) uncompressed base → header verified → the base cache (atomic)."""
    import shutil
    import sys

    spec = parted_base(entry["base"])
    try:
        import gguf  # noqa: F401
    except ImportError:  # the image has no gguf: the boot bundle's vendored copy
        if vendor is not None and str(vendor) not in sys.path:
            sys.path.insert(0, str(vendor))
    check_tied(joined, spec)
    target = default_cache_dir() / entry["raw_name"]
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(target.name + ".installing")
    shutil.move(str(joined), tmp)
    os.replace(tmp, target)
    return target
