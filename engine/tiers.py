"""The model tiers and what ``--model default`` means: the measurements in ``engine/tiers.json`` (each row
with its machine and command; docs/MODELS.md "Tiers"), read here, printed by `edit-server models`.

``--model default`` is resolved per device kind by `choose` (`default_model` logs the choice at INFO):

* on a CPU, the best-quality tier whose recorded 2-core CPU latency row meets the typing table
  (single line while typing p50 / p95, next edit p50: ``typing_table`` in the JSON, docs/PERFORMANCE.md);
* on a GPU, the best-quality tier, full stop;
* in both cases only among tiers whose weights are already on this machine — a fetched base is used,
  never fetched at start-up — and the embedded model (`EMBEDDED`: SmolLM2-135M + the shipped
  block-diffusion adapter) otherwise. With ``$EDIT_SERVER_ADAPTER`` set (a run's adapter for the embedded
  base: the GPU recipe's evals) ``default`` is the embedded model.

Quality is the HumanEval-infilling single-line pass@1, then multi-line. Training and the GPU recipe name the
embedded model explicitly (`EMBEDDED`), so they never switch with the measurements.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

DATA = Path(__file__).resolve().parent / "tiers.json"
EMBEDDED = "smollm2-bd3"  # the embedded model's explicit name (engine.default); "default" may resolve elsewhere
DEFAULT = "default"
# specs whose adapter is the embedded model's (the recipe aligns it, $EDIT_SERVER_ADAPTER replaces it): the explicit
# name, and "default" as older plans wrote it (with that variable set, "default" resolves to the embedded model)
EMBEDDED_SPECS = (EMBEDDED, DEFAULT)


@dataclass(frozen=True)
class Shipped:
    """A tier that is a base + one of our block-diffusion adapters shipped in ``engine/weights``."""

    stem: str  # engine/weights/<stem>.safetensors + .json
    base: str | None  # the parted base it needs in the cache (None: SmolLM2's, fetched at first start)


# --model name → its shipped adapter: the embedded model, and the Qwen2.5-Coder-0.5B adaptation (H200)
SHIPPED = {EMBEDDED: Shipped("default", None),
           "qwen2.5-coder-0.5b-bd3": Shipped("qwen2_5-coder-0_5b-bd3", "qwen2.5-coder-0.5b")}


class TierDataError(ValueError):
    """engine/tiers.json (or a given file) is malformed: the message names the file and the field."""


@dataclass(frozen=True)
class Latency:
    inline_p50_ms: float | None
    inline_p95_ms: float | None
    next_edit_p50_ms: float | None
    row: str = ""
    machine: str = ""
    source: str = ""
    command: str = ""


@dataclass(frozen=True)
class Quality:
    single_line: float | None  # pass@1, 0..1
    single_line_n: int = 0
    multi_line: float | None = None
    multi_line_n: int = 0
    row: str = ""
    machine: str = ""
    source: str = ""
    command: str = ""

    def key(self) -> tuple[float, float]:
        return (self.single_line if self.single_line is not None else -1.0,
                self.multi_line if self.multi_line is not None else -1.0)


@dataclass(frozen=True)
class TypingTable:
    inline_p50_ms: float
    inline_p95_ms: float
    next_edit_p50_ms: float
    source: str = ""

    def misses(self, lat: Latency | None) -> str | None:
        """Why ``lat`` does not meet the table (None: it does). A missing number misses."""
        if lat is None:
            return "no recorded CPU latency row"
        out = []
        for name, goal in (("inline_p50_ms", self.inline_p50_ms), ("inline_p95_ms", self.inline_p95_ms),
                           ("next_edit_p50_ms", self.next_edit_p50_ms)):
            got = getattr(lat, name)
            if got is None:
                out.append(f"{name} not measured")
            elif got > goal:
                out.append(f"{name} {got:,.0f} > {goal:,.0f}")
        return "; ".join(out) or None


@dataclass(frozen=True)
class Tier:
    model: str  # the --model spec
    what: str
    size: str  # download / disk
    context: int  # positions
    decoding: str
    quality: Quality | None = None
    latency: dict[str, Latency | None] = field(default_factory=dict)  # device kind -> row
    # the gate's show thresholds measured on a tier that has no adapter file to carry them (an AR base):
    # {kind: {"threshold": x, "measured": "machine, command, outcome"}}, as an adapter's ``show_thresholds``
    show_thresholds: dict[str, Any] | None = None

    @property
    def quality_row(self) -> str:
        return self.quality.row if self.quality is not None and self.quality.row else "not measured here"

    def latency_row(self, kind: str = "cpu") -> str:
        lat = self.latency.get(kind)
        return f"{lat.row} ({lat.machine})" if lat is not None else "not measured here"

    def as_dict(self) -> dict[str, Any]:
        from dataclasses import asdict

        d = asdict(self)
        d["quality_row"], d["latency_row"] = self.quality_row, self.latency_row("cpu")
        return d


@dataclass(frozen=True)
class Table:
    tiers: tuple[Tier, ...]
    typing: TypingTable
    embedded: str = EMBEDDED


# ---- reading the data ----------------------------------------------------------------------------
def _build(cls: type, raw: Any, where: str) -> Any:
    if not isinstance(raw, dict):
        raise TierDataError(f"{where}: expected an object, got {type(raw).__name__}")
    names = set(cls.__dataclass_fields__)
    unknown = sorted(set(raw) - names)
    if unknown:
        raise TierDataError(f"{where}: unknown field(s) {', '.join(unknown)}")
    try:
        return cls(**raw)
    except TypeError as e:
        raise TierDataError(f"{where}: {e}") from None


def parse(data: dict[str, Any], source: str = "tiers.json") -> Table:
    """``data`` (the JSON's content) → `Table`; a malformed field raises `TierDataError` naming it."""
    if not isinstance(data, dict) or not isinstance(data.get("tiers"), list):
        raise TierDataError(f"{source}: field 'tiers' must be a list")
    typing = _build(TypingTable, data.get("typing_table"), f"{source}: typing_table")
    out = []
    for i, raw in enumerate(data["tiers"]):
        where = f"{source}: tiers[{i}]"
        if not isinstance(raw, dict) or not isinstance(raw.get("model"), str):
            raise TierDataError(f"{where}.model: expected a string")
        where = f"{source}: tiers[{i}] ({raw['model']})"
        q = raw.get("quality")
        lat = raw.get("latency") or {}
        if not isinstance(lat, dict):
            raise TierDataError(f"{where}.latency: expected an object of device kind -> row")
        row = {k: v for k, v in raw.items() if k not in ("quality", "latency")}
        try:
            out.append(Tier(**row, quality=None if q is None else _build(Quality, q, f"{where}.quality"),
                            latency={k: None if v is None else _build(Latency, v, f"{where}.latency.{k}")
                                     for k, v in lat.items()}))
        except TypeError as e:
            raise TierDataError(f"{where}: {e}") from None
    return Table(tuple(out), typing, str(data.get("embedded", EMBEDDED)))


def show_thresholds(model: str, path: str | Path = DATA) -> dict[str, Any] | None:
    """The show thresholds recorded for the tier ``model`` (`Tier.show_thresholds`), or None."""
    tier = next((t for t in load(path).tiers if t.model == model), None)
    return tier.show_thresholds if tier is not None else None


@lru_cache(maxsize=4)
def load(path: str | Path = DATA) -> Table:
    p = Path(path)
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise TierDataError(f"{p}: cannot read the tier table ({e})") from None
    return parse(data, str(p))


def tiers(table: Table | None = None) -> list[Tier]:
    """Our measured tiers, then the registry's diffusion models (Hub downloads; not measured here)."""
    from engine.registry import MODELS

    out = list((table or load()).tiers)
    for e in MODELS:
        size = "?"
        if e.shape is not None:
            from engine.loading.archs import args_from_dict

            args, _ = args_from_dict(dict(e.shape, architectures=[e.architecture]))
            size = f"{args.param_count() * 2 / 1e9:.1f} GB bf16 (Hub)"
        out.append(Tier(e.name, f"{e.family} ({e.attention} diffusion)", size, e.context, e.sampler.published))
    return out


# ---- what "default" means ------------------------------------------------------------------------
def available(model: str) -> bool:
    """Whether ``model``'s weights are on this machine (no fetching): a shipped adapter must be in
    ``engine/weights`` (the embedded one's SmolLM2 base comes from the package registry at first start, as
    always) and a parted base — its own or the one an adapter tier stacks on — in the cache."""
    shipped = SHIPPED.get(model)
    if shipped is not None:
        from engine.default import WEIGHTS

        return (WEIGHTS / f"{shipped.stem}.safetensors").is_file() and (
            shipped.base is None or available(shipped.base))
    from engine.loading.base import PARTED, parted_path

    if model in PARTED:
        p = parted_path(model)
        return p.is_file() and p.stat().st_size == PARTED[model].size
    return False


@dataclass(frozen=True)
class Choice:
    model: str
    device: str  # the device kind it was chosen for
    reason: str

    def line(self) -> str:
        return f"--model default -> {self.model} on {self.device}: {self.reason}"


def choose(device: str, table: Table | None = None, have: Callable[[str], bool] | None = None,
           adapter: str = "") -> Choice:
    """The tier ``--model default`` loads on device kind ``device`` ("cpu", "cuda", ...), with why.
    ``have``: whether a tier's weights are on this machine (default `available`)."""
    t = table or load()
    have = have or available
    kind = "cpu" if device == "cpu" else "gpu"
    if adapter:
        return Choice(t.embedded, device, f"$EDIT_SERVER_ADAPTER names an adapter of the embedded model ({adapter})")
    ranked = sorted((x for x in t.tiers if x.quality is not None and x.quality.single_line is not None),
                    key=lambda x: x.quality.key(), reverse=True)  # type: ignore[union-attr]
    skipped: list[str] = []
    for x in ranked:
        if kind == "cpu":
            why = t.typing.misses(x.latency.get("cpu"))
            if why is not None:
                skipped.append(f"{x.model}: misses the CPU typing table ({why})")
                continue
        if not have(x.model):
            skipped.append(f"{x.model}: weights not on this machine"
                           + ("" if x.model == t.embedded else f" (edit-server train fetch-base {x.model})"))
            continue
        q = x.quality
        why = ("the best quality" if kind == "gpu" else "the best quality that meets the CPU typing table") + (
            f" (single-line pass@1 {q.single_line:.1%})" if q is not None and q.single_line is not None else "")
        return Choice(x.model, device, why + ("; skipped " + "; ".join(skipped) if skipped else ""))
    return Choice(t.embedded, device, "the embedded model (no measured tier fits"
                  + ("; skipped " + "; ".join(skipped) if skipped else "") + ")")


def default_model(device: str, *, quiet: bool = False) -> Choice:
    """`choose` for device kind ``device`` (a resolved one: "cpu", "cuda", ...; `engine.specs.resolve_device`),
    logged at INFO unless ``quiet``."""
    from engine import options

    c = choose(device, adapter=options.env().adapter)
    if not quiet:
        log.info("%s", c.line())
    return c


def resolve_spec(spec: str, device: str) -> str:
    """``spec`` with ``default`` replaced by the tier it means on device kind ``device`` (`default_model`)."""
    return default_model(device).model if spec.strip() == DEFAULT else spec


def shipped_adapter(spec: str) -> Path | None:
    """The adapter (path without suffix) a shipped tier loads, None for other specs. The embedded model's is
    ``$EDIT_SERVER_ADAPTER`` when that is set (a run's adapter: the GPU recipe's evals)."""
    name = spec.strip().lower()
    shipped = SHIPPED.get(name)
    if shipped is None:
        return None
    from engine import options
    from engine.default import WEIGHTS

    env = options.env().adapter if name == EMBEDDED else ""
    return Path(env) if env else WEIGHTS / shipped.stem

