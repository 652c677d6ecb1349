"""The next-edit location model at serving time: the probability that a proposal (`propose.Proposal`) is the
user's next edit, exactly — one scale for the carried edits and the rules' candidates — and the one show
threshold fitted with it.

The model is a logistic regression over `propose.FEATURES` fitted on the training repositories' edit
sessions by ``edit-server align locator`` (scikit-learn, offline), stored as JSON: the feature names, their
standardisation, the coefficients, the threshold for the target precision and what it was fitted on.
Serving reads it with the standard library alone (a dot product per proposal: microseconds). A file that
is not such a model is named with the field that is wrong.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

SHIPPED = Path(__file__).with_name("locator.json")
KINDS = ("edit:carry", "edit:complete", "edit:repeat", "edit:analog", "edit:move", "edit:import")  # gated on its probability


@dataclass(frozen=True)
class Locator:
    features: tuple[str, ...]
    mean: tuple[float, ...]
    scale: tuple[float, ...]
    coef: tuple[float, ...]
    intercept: float
    threshold: float  # show at or above this probability
    meta: Mapping[str, Any]

    def probability(self, feats: Mapping[str, float]) -> float:
        z = self.intercept
        for name, m, s, w in zip(self.features, self.mean, self.scale, self.coef, strict=True):
            z += w * (feats.get(name, 0.0) - m) / s
        return 1.0 / (1.0 + math.exp(-max(-40.0, min(40.0, z))))

    def thresholds(self) -> dict[str, float]:
        """The show threshold of every kind this model scores."""
        return {k: self.threshold for k in KINDS}

    def to_json(self) -> dict[str, Any]:
        return {"format": "edit-server-locator/1", "features": list(self.features), "mean": list(self.mean),
                "scale": list(self.scale), "coef": list(self.coef), "intercept": self.intercept,
                "threshold": self.threshold, "meta": dict(self.meta)}


def _floats(d: Mapping[str, Any], name: str, n: int, where: str) -> tuple[float, ...]:
    v = d.get(name)
    if not isinstance(v, list) or len(v) != n or not all(isinstance(x, (int, float)) for x in v):
        raise ValueError(f"{where}: field {name!r} must be a list of {n} numbers")
    return tuple(float(x) for x in v)


def from_json(d: Mapping[str, Any], where: str = "locator") -> Locator:
    """A `Locator` from its JSON object; a ValueError names ``where`` and the field that is wrong."""
    if d.get("format") != "edit-server-locator/1":
        raise ValueError(f"{where}: field 'format' must be 'edit-server-locator/1'")
    feats = d.get("features")
    if not isinstance(feats, list) or not all(isinstance(x, str) for x in feats):
        raise ValueError(f"{where}: field 'features' must be a list of names")
    n = len(feats)
    scale = _floats(d, "scale", n, where)
    if any(s <= 0 for s in scale):
        raise ValueError(f"{where}: field 'scale' must be positive")
    for name in ("intercept", "threshold"):
        if not isinstance(d.get(name), (int, float)):
            raise ValueError(f"{where}: field {name!r} must be a number")
    return Locator(tuple(feats), _floats(d, "mean", n, where), scale, _floats(d, "coef", n, where),
                   float(d["intercept"]), float(d["threshold"]), dict(d.get("meta") or {}))


@lru_cache(maxsize=4)
def load(path: str | None = None) -> Locator:
    """The model in ``path`` (default: the shipped one)."""
    p = Path(path) if path else SHIPPED
    try:
        d = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise ValueError(f"{p}: not a locator model ({e})") from e
    return from_json(d, str(p))


def rank(locator: Locator, feats: Sequence[Mapping[str, float]]) -> list[float]:
    return [locator.probability(f) for f in feats]
