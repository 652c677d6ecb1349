"""Named models: ``ORG/NAME[@REVISION]`` fetched from the Hugging Face Hub into the standard HF cache.

Only what the loader reads is downloaded — safetensors weights (+ shard index), ``config.json`` /
``generation_config.json`` and the tokenizer files. Pickles (``*.bin``, ``*.pt``, ...) and remote
code (``*.py``) are never fetched, so nothing is unpickled or executed. Downloads go file by file
through ``huggingface_hub.hf_hub_download`` (resumable: an interrupted file continues from its
``.incomplete`` part), all pinned to the commit the revision resolved to; the commit is recorded in
the checkpoint's metadata.

Environment, read at call time: ``HF_HUB_OFFLINE`` (cache only; a clear error when the model is
not cached), ``HF_TOKEN`` (gated / private models), ``HF_ENDPOINT`` (mirrors, tests),
``HF_HUB_CACHE`` / ``HF_HOME`` (cache location).

Progress: a tqdm bar on stderr and, when given, ``progress(done_bytes, total_bytes, message)``
(called from the downloading thread, at most every 0.25 s and at the end of every file;
``total_bytes`` is known from the start, ``done_bytes`` only grows and ends equal to it; a model
already complete in the cache gives one call ``(total, total, "<model>: cached")``; offline: none).
"""

from __future__ import annotations

import fnmatch
import logging
import re
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine import options
from engine.loading.common import CheckpointError

log = logging.getLogger(__name__)

Progress = Callable[[int, int, str], None]  # (done_bytes, total_bytes, message)

ALLOW_PATTERNS = ("*.safetensors", "model.safetensors.index.json", "config.json", "generation_config.json",
                  "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json",
                  "vocab.json", "merges.txt", "chat_template.jinja", "chat_template.json")
PICKLE_PATTERNS = ("*.bin", "*.pt", "*.pth", "*.ckpt", "*.pkl", "*.pickle")
TOKENIZER_FILES = ("tokenizer.json", "vocab.json")  # one of them is needed (vocab.json + merges.txt)

_SPEC = re.compile(r"^(?P<repo>[A-Za-z0-9][\w.\-]*/[\w.\-]+)(?:@(?P<rev>[\w.\-/]+))?$")
_COMMIT = re.compile(r"^[0-9a-f]{40}$")
_TRUE = {"1", "true", "yes", "on"}
PROGRESS_EVERY_S = 0.25


@dataclass(frozen=True)
class HubSpec:
    repo_id: str
    revision: str = "main"

    def __str__(self) -> str:
        return self.repo_id if self.revision == "main" else f"{self.repo_id}@{self.revision}"


@dataclass(frozen=True)
class Snapshot:
    path: Path  # the snapshot directory in the HF cache
    repo_id: str
    revision: str  # as requested
    commit: str  # what it resolved to (pinned)
    downloaded: bool  # False: everything came from the cache


def parse_hub_spec(spec: str) -> HubSpec | None:
    """``ORG/NAME`` or ``ORG/NAME@REVISION`` → `HubSpec`; None for anything else (paths, presets).
    A spec naming an existing local path is a path, not a hub id."""
    spec = spec.strip()
    m = _SPEC.match(spec)
    if not m or spec.startswith((".", "/", "~")) or Path(spec.split("@")[0]).expanduser().exists():
        return None
    return HubSpec(m.group("repo"), m.group("rev") or "main")


def offline() -> bool:
    import huggingface_hub.constants as c

    return options.env().hf_hub_offline.lower() in _TRUE or bool(c.HF_HUB_OFFLINE)


def cache_dir() -> Path:
    o = options.env()
    if o.hf_hub_cache:
        return Path(o.hf_hub_cache).expanduser()
    if o.hf_home:
        return Path(o.hf_home).expanduser() / "hub"
    return Path("~/.cache/huggingface/hub").expanduser()


def _allowed(name: str) -> bool:
    base = name.rsplit("/", 1)[-1]
    if "/" in name:  # sub-folders (original/, onnx/, ...) are other formats
        return False
    return any(fnmatch.fnmatch(base, p) for p in ALLOW_PATTERNS)


def _storage(repo_id: str, root: Path) -> Path:
    return root / ("models--" + repo_id.replace("/", "--"))


def missing_files(root: Path) -> list[str]:
    """What a snapshot directory lacks to be loadable (empty list = complete)."""
    import json

    miss = [] if (root / "config.json").is_file() else ["config.json"]
    if not any((root / f).is_file() for f in TOKENIZER_FILES):
        miss.append("tokenizer.json")
    index = root / "model.safetensors.index.json"
    if index.is_file():
        try:
            shards = set(json.loads(index.read_text())["weight_map"].values())
        except (ValueError, KeyError):
            return [*miss, "model.safetensors.index.json (unreadable)"]
        miss += sorted(s for s in shards if not (root / s).is_file())
    elif not any(root.glob("*.safetensors")):
        miss.append("*.safetensors")
    return miss


def cached_snapshot(spec: HubSpec, root: Path | None = None) -> Snapshot | None:
    """The complete cached snapshot of ``spec`` (no network), or None."""
    store = _storage(spec.repo_id, root or cache_dir())
    commit = spec.revision if _COMMIT.match(spec.revision) else None
    ref = store / "refs" / spec.revision
    if commit is None and ref.is_file():
        commit = ref.read_text().strip()
    if commit is None:
        return None
    snap = store / "snapshots" / commit
    if not snap.is_dir() or missing_files(snap):
        return None
    return Snapshot(snap, spec.repo_id, spec.revision, commit, downloaded=False)


# ---- progress ------------------------------------------------------------------------------------
class _Tracker:
    """Aggregates per-file byte counts into one total for the callback and one stderr bar."""

    def __init__(self, total: int, label: str, progress: Progress | None) -> None:
        from tqdm.auto import tqdm

        self.total, self.label, self.progress = total, label, progress
        self.done_files = 0
        self.last = 0.0
        self.active: dict[int, int] = {}
        self.lock = threading.Lock()
        disable = options.env().hf_hub_disable_progress_bars.lower() in _TRUE
        self.bar = tqdm(total=total, unit="B", unit_scale=True, desc=f"Downloading {label}",
                        file=sys.stderr, disable=disable, mininterval=0.5)

    def done(self) -> int:
        return self.done_files + sum(self.active.values())

    def report(self, message: str, force: bool = False) -> None:
        """Update the bar; call ``progress`` at most every ``PROGRESS_EVERY_S`` (always at a file end)."""
        d = self.done()
        self.bar.update(max(0, d - self.bar.n))
        now = time.monotonic()
        if self.progress is not None and (force or now - self.last >= PROGRESS_EVERY_S):
            self.last = now
            self.progress(min(d, self.total), self.total, message)

    def file_done(self, size: int, name: str) -> None:
        with self.lock:
            self.done_files += size
            self.active.clear()
            self.report(f"{self.label}: {name}", force=True)

    def bar_class(self, name: str) -> type:
        """A tqdm stand-in that hf_hub_download drives for one file."""
        tracker = self

        class _FileBar:
            def __init__(self, *args: Any, **kw: Any) -> None:
                self.n = int(kw.get("initial") or 0)
                with tracker.lock:
                    tracker.active[id(self)] = self.n
                    tracker.report(f"{tracker.label}: {name}")

            def __enter__(self) -> _FileBar:
                return self

            def __exit__(self, *exc: object) -> None:
                self.close()

            def update(self, n: int | float | None = 1) -> None:
                self.n += int(n or 0)
                with tracker.lock:
                    tracker.active[id(self)] = self.n
                    tracker.report(f"{tracker.label}: {name}")

            def update_transfer(self, n: int | float | None = 1) -> None:  # xet network bytes
                pass

            def set_postfix_str(self, *a: Any, **k: Any) -> None:
                pass

            set_transfer_postfix_str = set_postfix_str
            set_description = set_postfix_str
            refresh = set_postfix_str

            def close(self) -> None:
                pass

        return _FileBar

    def close(self) -> None:
        self.bar.close()


# ---- fetching ----------------------------------------------------------------------------------
def _token() -> str | None:
    return options.env().hf_token or None


def _endpoint() -> str | None:
    return options.env().hf_endpoint or None


def _not_cached(spec: HubSpec, root: Path, why: str) -> CheckpointError:
    return CheckpointError(
        f"model {spec} is not in the Hugging Face cache ({root}) and {why}; download it once with "
        f"network access (e.g. `edit-server check --model {spec}`), or point --model at a local "
        "directory")


def fetch(spec: HubSpec | str, progress: Progress | None = None, *, root: Path | None = None) -> Snapshot:
    """Resolve ``spec`` to a complete local snapshot, downloading what is missing."""
    if isinstance(spec, str):
        parsed = parse_hub_spec(spec)
        if parsed is None:
            raise CheckpointError(f"{spec!r} is not a hub model id (ORG/NAME[@REVISION])")
        spec = parsed
    root = root or cache_dir()
    if offline():
        snap = cached_snapshot(spec, root)
        if snap is None:
            raise _not_cached(spec, root, "HF_HUB_OFFLINE is set")
        log.info("%s: offline, using cached commit %s", spec, snap.commit)
        return snap
    try:
        return _download(spec, root, progress)
    except CheckpointError:
        raise
    except Exception as e:  # network down, hub error: fall back to a complete cached copy
        from huggingface_hub.errors import GatedRepoError, RepositoryNotFoundError, RevisionNotFoundError

        if isinstance(e, GatedRepoError):
            raise CheckpointError(f"model {spec} is gated: accept its license on the hub and set "
                                  "HF_TOKEN") from None
        if isinstance(e, RevisionNotFoundError):
            raise CheckpointError(f"model {spec}: revision {spec.revision!r} not found") from None
        if isinstance(e, RepositoryNotFoundError):
            raise CheckpointError(f"model {spec} not found on the hub (or private: set HF_TOKEN)") from None
        snap = cached_snapshot(spec, root)
        if snap is None:
            raise _not_cached(spec, root, f"the hub could not be reached ({type(e).__name__}: {e})") from None
        log.warning("%s: hub unreachable (%s); using cached commit %s", spec, e, snap.commit)
        return snap


def _download(spec: HubSpec, root: Path, progress: Progress | None) -> Snapshot:
    from huggingface_hub import HfApi, hf_hub_download

    api = HfApi(endpoint=_endpoint(), token=_token())
    info = api.model_info(spec.repo_id, revision=spec.revision, files_metadata=True)
    commit = str(info.sha)
    files = [(s.rfilename, int(s.size or 0)) for s in (info.siblings or []) if _allowed(s.rfilename)]
    names = {n for n, _ in files}
    if not any(n.endswith(".safetensors") for n in names):
        all_names = [s.rfilename for s in (info.siblings or [])]
        pickles = [n for n in all_names if any(fnmatch.fnmatch(n, p) for p in PICKLE_PATTERNS)]
        what = f"only pickle weights ({', '.join(pickles[:3])})" if pickles else "no *.safetensors weights"
        raise CheckpointError(f"model {spec} has {what}; refusing to download or unpickle them")
    if "config.json" not in names:
        raise CheckpointError(f"model {spec} has no config.json")
    cached = cached_snapshot(HubSpec(spec.repo_id, commit), root)
    store = _storage(spec.repo_id, root)
    if cached is None:
        total = sum(size for _, size in files)
        tracker = _Tracker(total, str(spec), progress)
        try:
            for name, size in sorted(files, key=lambda f: f[1]):  # small files (config) first
                hf_hub_download(spec.repo_id, name, revision=commit, cache_dir=str(root),
                                endpoint=_endpoint(), token=_token(), tqdm_class=tracker.bar_class(name))
                tracker.file_done(size, name)
        finally:
            tracker.close()
    elif progress is not None:
        total = sum(size for _, size in files)
        progress(total, total, f"{spec}: cached")
    if not _COMMIT.match(spec.revision):  # pin: refs/<branch or tag> -> commit (offline lookups)
        ref = store / "refs" / spec.revision
        ref.parent.mkdir(parents=True, exist_ok=True)
        if not ref.is_file() or ref.read_text().strip() != commit:
            ref.write_text(commit)
    snap = store / "snapshots" / commit
    miss = missing_files(snap)
    if miss:
        raise CheckpointError(f"model {spec} (commit {commit[:12]}): the download is missing "
                              f"{', '.join(miss)}")
    return Snapshot(snap, spec.repo_id, spec.revision, commit, downloaded=cached is None)


def load_hub(spec: HubSpec | str, dtype: Any = None, progress: Progress | None = None) -> Any:
    """Fetch (or find cached) and load a hub model; the commit is pinned in ``meta``."""
    from engine.loading.hf import load_hf

    snap = fetch(spec, progress)
    ck = load_hf(snap.path, dtype=dtype, hub_id=snap.repo_id)
    ck.meta.update(hub_repo=snap.repo_id, revision=snap.commit, requested_revision=snap.revision,
                   source=str(snap.path))
    ck.name = f"{snap.repo_id}@{snap.commit[:12]}"
    return ck
