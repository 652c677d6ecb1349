"""Show/hide on the KTO-aligned model's implicit reward; the confidence gate when there is none.

An aligned adapter (``edit-server align kto``) comes with ``NAME.gate.json``: per suggestion kind the
isotonic map (length-normalised reward (r − z0)/n → P(accepted)) fitted on held-out outcomes and the
lowest reward whose held-out precision reaches the target (`align.fit`, the same fitting as the
confidence calibration). `decide` shows a suggestion iff its reward reaches that threshold and reports
the calibrated probability as its score. No reward (no aligned adapter loaded, or the scorer failed)
or no calibration for the kind → `gate.decide` on the token confidences, exactly as before.

Versioned local adapters: ``$XDG_DATA_HOME/edit-server/adapters/kto-vN.*`` and ``CURRENT`` (the name
in use, or absent); `aligned_engine` stacks the current one on a loaded engine.
"""

from __future__ import annotations

import bisect
import json
import logging
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from edit_server.selectivity import gate
from edit_server.selectivity.thresholds import threshold_for
from engine import options

log = logging.getLogger(__name__)

CURRENT = "CURRENT"
_VERSION = re.compile(r"^kto-v(\d+)\.safetensors$")


# ---- versioned adapters ----------------------------------------------------------------------
def adapters_dir() -> Path:
    return options.env().data_home() / "edit-server" / "adapters"


def versions(d: Path | None = None) -> list[int]:
    d = d or adapters_dir()
    if not d.is_dir():
        return []
    return sorted(int(m.group(1)) for p in d.iterdir() if (m := _VERSION.match(p.name)))


def current_adapter(d: Path | None = None) -> Path | None:
    """The adapter in use (path without suffix), or None."""
    d = d or adapters_dir()
    try:
        name = (d / CURRENT).read_text().strip()
    except OSError:
        return None
    path = d / name
    return path if name and Path(f"{path}.safetensors").is_file() else None


def set_current(d: Path, name: str | None) -> None:
    d.mkdir(parents=True, exist_ok=True)
    if name is None:
        (d / CURRENT).unlink(missing_ok=True)
        return
    tmp = d / (CURRENT + ".tmp")
    tmp.write_text(name + "\n")
    tmp.replace(d / CURRENT)


def calibration_path(adapter: Path | str) -> Path:
    return Path(f"{adapter}.gate.json")


# ---- calibration -----------------------------------------------------------------------------
@dataclass
class RewardCalibration:
    thresholds: dict[str, float]  # kind -> lowest reward score shown (at the calibration's target)
    points: dict[str, list[tuple[float, float]]]  # kind -> isotonic (score, P(accepted)), increasing
    # kind -> (threshold, precision, held-out coverage) per candidate threshold (files before the
    # ``gate.ktoTargetPrecision`` setting have none: their threshold is fixed)
    curves: dict[str, list[tuple[float, float, float]]] = field(default_factory=dict)

    @classmethod
    def load(cls, path: Path) -> RewardCalibration:
        try:
            kinds = json.loads(path.read_text())["kinds"]
            return cls({k: float(v["threshold"]) for k, v in kinds.items()},
                       {k: [(float(x), float(y)) for x, y in v["points"]] for k, v in kinds.items()},
                       {k: [(float(x), float(p), float(c)) for x, p, c in v.get("curve") or []]
                        for k, v in kinds.items()})
        except (ValueError, KeyError, TypeError) as e:
            raise ValueError(f"{path}: not a reward calibration file ({e})") from e

    def probability(self, kind: str, score: float) -> float:
        pts = self.points.get(kind) or []
        i = bisect.bisect_right([x for x, _ in pts], score) - 1
        return pts[max(0, i)][1] if pts else 0.0

    def threshold(self, kind: str, target_precision: float = 0.0) -> float:
        """The reward threshold of ``kind`` for a target precision of shown suggestions (0 = the one
        fitted at calibration time; a file without a curve keeps that one)."""
        curve = self.curves.get(kind)
        if target_precision <= 0 or not curve:
            return self.thresholds[kind]
        return threshold_for(curve, target_precision)


_CAL: dict[tuple[str, float], RewardCalibration | None] = {}


def calibration_for(adapter: str | Path) -> RewardCalibration | None:
    """The calibration next to ``adapter`` (cached by mtime), None when absent or broken."""
    path = calibration_path(adapter)
    try:
        key = (str(path), path.stat().st_mtime)
    except OSError:
        return None
    if key not in _CAL:
        try:
            _CAL[key] = RewardCalibration.load(path)
        except ValueError:
            log.warning("ignoring reward calibration", exc_info=True)
            _CAL[key] = None
    return _CAL[key]


def adapter_path(adapter: str | Path | None) -> Path | None:
    """The aligned adapter a setting names: "" = the current local version, None / "off" = none."""
    return current_adapter() if adapter == "" else (None if adapter in (None, "off") else Path(adapter))


# ---- the decision ------------------------------------------------------------------------------
def decide(kind: str, text: str, confidences: list[float], reward: Any, *, enabled: bool,
           threshold: float, target_precision: float = 0.0, rule: str | None = None) -> gate.Decision:
    """The show/hide decision: on the reward (``engine.reward.Reward``) when an aligned adapter with a
    calibration for ``kind`` produced it — threshold for ``target_precision`` (setting
    ``gate.ktoTargetPrecision``; 0 = as calibrated) —, else the confidence gate with ``threshold``.
    ``rule``: a rule check's reason to hide (syntax errors introduced), whichever gate decides."""
    cal = calibration_for(reward.adapter) if reward is not None and reward.adapter else None
    if cal is None or kind not in cal.thresholds:
        return gate.decide(text, confidences, enabled, threshold, rule)
    p = cal.probability(kind, reward.score)
    if not text.strip():
        return gate.Decision(False, p, "empty")
    if not enabled:
        return gate.Decision(True, p, "ok")
    if rule:
        return gate.Decision(False, p, rule)
    show = reward.score >= cal.threshold(kind, target_precision)
    return gate.Decision(show, p, "ok" if show else "low reward")
