"""Typed server settings (msgspec, camelCase on the wire).

Raw client options (``initializationOptions`` / ``workspace/didChangeConfiguration``) are kept apart
from resolved settings: :func:`resolve` validates key by key, so one bad value falls back to its
default and is reported by name while every other key still applies.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec

Unit = Annotated[float, msgspec.Meta(ge=0.0, le=1.0)]
NonNeg = Annotated[int, msgspec.Meta(ge=0)]


class Gate(msgspec.Struct, rename="camel", kw_only=True):
    enabled: bool = True
    threshold: Unit = 0.5
    # per-kind thresholds learned by `edit-server align gate`: "" = its default file when present,
    # "off" = use ``threshold`` only, else a path
    calibration: str = ""


class Feature(msgspec.Struct, rename="camel", kw_only=True):
    enabled: bool = True


class Settings(msgspec.Struct, rename="camel", kw_only=True):
    model: str = "default"
    device: Literal["auto", "cpu", "cuda", "mps"] = "auto"
    # prompt tokens; 0 = auto: the model's context (capped at 32,768) on a GPU, 2,048 on a CPU
    context_budget: Annotated[int, msgspec.Meta(ge=0, le=32768)] = 0
    debounce_ms: Annotated[int, msgspec.Meta(ge=0, le=5000)] = 0
    max_tokens: Annotated[int, msgspec.Meta(ge=1, le=512)] = 64
    inline_completion: Feature = msgspec.field(default_factory=Feature)
    next_edit: Feature = msgspec.field(default_factory=Feature)
    gate: Gate = msgspec.field(default_factory=Gate)
    exclude: list[str] = msgspec.field(default_factory=lambda: ["**/.env", "**/*.pem", "**/*.key"])
    history_size: Annotated[int, msgspec.Meta(ge=0, le=64)] = 6
    edit_lines_before: Annotated[int, msgspec.Meta(ge=0, le=50)] = 3
    edit_lines_after: Annotated[int, msgspec.Meta(ge=0, le=50)] = 6
    auto_trigger_max_right: NonNeg = 8
    threads: Annotated[int, msgspec.Meta(ge=0, le=256)] = 0  # torch CPU threads; 0 = torch's default
    feedback_db: str = ""  # "" = user data dir; ":memory:" for tests
    suggestion_ttl_s: Annotated[float, msgspec.Meta(ge=0.0)] = 30.0


def _wire_names(cls: type[msgspec.Struct]) -> dict[str, str]:
    """camelCase wire name -> attribute name."""
    return {enc: attr for attr, enc in zip(cls.__struct_fields__, cls.__struct_encode_fields__, strict=True)}


def _resolve_struct(cls: type[msgspec.Struct], raw: Any, base: msgspec.Struct, prefix: str,
                    bad: list[str]) -> msgspec.Struct:
    if not isinstance(raw, dict):
        bad.append(prefix.rstrip(".") or "settings")
        return base
    names = _wire_names(cls)
    hints = {f.name: f.type for f in msgspec.structs.fields(cls)}
    updates: dict[str, Any] = {}
    for key, value in raw.items():
        attr = names.get(key)
        if attr is None:
            continue  # unknown keys are ignored (forward compatible), not an error
        typ = hints[attr]
        sub = getattr(base, attr)
        if isinstance(sub, msgspec.Struct):
            updates[attr] = _resolve_struct(type(sub), value, sub, f"{prefix}{key}.", bad)
            continue
        try:
            updates[attr] = msgspec.convert(value, typ, strict=False)
        except msgspec.ValidationError:
            bad.append(prefix + key)
    return msgspec.structs.replace(base, **updates) if updates else base


def resolve(raw: Any, base: Settings | None = None) -> tuple[Settings, list[str]]:
    """Apply raw camelCase options over ``base`` (defaults). Returns (settings, bad keys)."""
    base = base if base is not None else Settings()
    if raw is None:
        return base, []
    if isinstance(raw, dict) and isinstance(raw.get("editServer"), dict):
        raw = raw["editServer"]  # didChangeConfiguration often nests under the section name
    bad: list[str] = []
    out = _resolve_struct(Settings, raw, base, "", bad)
    assert isinstance(out, Settings)
    return out, bad


def to_wire(settings: Settings) -> dict[str, Any]:
    return msgspec.to_builtins(settings)
