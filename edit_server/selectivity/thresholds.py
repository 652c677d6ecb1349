"""Show thresholds at serving time: per-kind thresholds learned by ``edit-server align gate`` — the user's
calibration file, else the model's own (measured on its outcomes and shipped in its adapter metadata,
``show_thresholds``: the engine's ``info``) — else the ``gate.threshold`` setting. Serving reads; ``align``
writes."""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from engine import options
from engine.types import EngineInfo

if TYPE_CHECKING:  # msgspec is not needed to fit or read thresholds (`align` runs on the GPU image without it)
    from edit_server.core.settings import Settings

log = logging.getLogger(__name__)
_CACHE: dict[tuple[str, float], dict[str, float]] = {}


MODEL_ORIGINS = ("model", "sampled")  # next-edit candidates the model wrote (`select.Candidate.origin`)
PARENT = {"edit:echo": "edit"}  # a kind with no threshold of its own takes its parent's (model output: fail closed)


def gate_kind(kind: str, origin: str | None) -> str:
    """The kind a show threshold is kept and looked up for: the model's own outputs share their kind (the
    thresholds a model ships were fitted on them); a rule's candidate has its own (``edit:repeat``,
    ``edit:analog``, ``edit:move``, ``edit:import``), calibrated apart, else held against ``gate.threshold``
    (never against the model's). The model's rewrite that echoes the recent edits (``edit:echo``,
    `echo_edit`) has its own too, else the model's rewrites' (`PARENT`)."""
    return kind if not origin or origin in MODEL_ORIGINS else f"{kind}:{origin}"


def default_calibration_path() -> Path:
    return options.env().config_home() / "edit-server" / "gate.json"


def load_thresholds(path: str | Path) -> dict[str, float]:
    """kind -> threshold from a calibration file ({} when absent); a broken file names itself."""
    p = Path(path)
    if not p.is_file():
        return {}
    try:
        kinds = json.loads(p.read_text())["kinds"]
        return {k: float(v["threshold"]) for k, v in kinds.items()}
    except (ValueError, KeyError, TypeError) as e:
        raise ValueError(f"{p}: not a gate calibration file ({e})") from e


def model_thresholds(info: EngineInfo | None) -> dict[str, float]:
    """kind -> show threshold the model ships (``info``: the engine's `EngineInfo`, None: no engine;
    ``info.show_thresholds``: ``{kind: {"threshold": x, …}}``)."""
    shipped = EngineInfo.of(info).show_thresholds or {}
    try:
        return {str(k): float(v["threshold"]) for k, v in shipped.items()}
    except (KeyError, TypeError, ValueError):
        log.warning("ignoring the model's show_thresholds: not {kind: {threshold: x}}")
        return {}


def gate_threshold(settings: Settings, kind: str, model: Mapping[str, float] | None = None) -> float:
    """The show threshold for ``kind``: the calibrated one when a calibration file is configured or in
    its default place (re-read when it changes), else the model's own (``model``: `model_thresholds`)
    unless the setting is "off", else ``gate.threshold``."""
    where = settings.gate.calibration
    if where == "off":
        return settings.gate.threshold
    fallback = _lookup(model or {}, kind, settings.gate.threshold) if not where else settings.gate.threshold
    path = Path(where) if where else default_calibration_path()
    try:
        key = (str(path), path.stat().st_mtime)
    except OSError:
        return fallback
    if key not in _CACHE:
        try:
            _CACHE[key] = load_thresholds(path)
        except ValueError:
            log.warning("ignoring gate calibration", exc_info=True)
            _CACHE[key] = {}
    return _lookup(_CACHE[key], kind, fallback)


def _lookup(table: Mapping[str, float], kind: str, default: float) -> float:
    """``kind``'s threshold in ``table``, else its `PARENT`'s, else ``default``."""
    while kind not in table and kind in PARENT:
        kind = PARENT[kind]
    return table.get(kind, default)


def threshold_for(curve: Sequence[Sequence[float]], target_precision: float) -> float:
    """The lowest threshold (most coverage) of a calibration ``curve`` — (threshold, precision, coverage),
    thresholds increasing, precision the lower of the fitting and the held-out part's — whose precision
    reaches the target; +inf (show nothing) when none does, on any score scale."""
    for x, precision, *_ in curve:  # increasing x: the first that reaches the target keeps the most coverage
        if precision >= target_precision:
            return float(x)
    return math.inf
