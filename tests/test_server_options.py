"""Settings: camelCase, per-key fallback with the bad keys named, nesting under "editServer"."""

from __future__ import annotations

from edit_server.core.settings import Settings, resolve, to_wire


def test_defaults_and_camel_case() -> None:
    s, bad = resolve({"model": "tiny-random", "contextBudget": 2048, "gate": {"enabled": False},
                      "inlineCompletion": {"enabled": False}, "exclude": ["*.secret"]})
    assert bad == []
    assert (s.model, s.context_budget, s.gate.enabled, s.gate.threshold) == ("tiny-random", 2048, False, 0.5)
    assert not s.inline_completion.enabled and s.next_edit.enabled and s.exclude == ["*.secret"]
    assert to_wire(s)["contextBudget"] == 2048


def test_bad_values_fall_back_and_are_named() -> None:
    base = Settings(max_tokens=10)
    s, bad = resolve({"maxTokens": -1, "device": "tpu", "gate": {"threshold": 2.0, "enabled": False},
                      "debounceMs": "fast", "nextEdit": 3, "unknownKey": 1}, base)
    assert sorted(bad) == ["debounceMs", "device", "gate.threshold", "maxTokens", "nextEdit"]
    assert (s.max_tokens, s.device, s.gate.threshold, s.debounce_ms) == (10, "auto", 0.5, 0)
    assert s.gate.enabled is False  # the good sibling key still applies


def test_section_nesting_and_none() -> None:
    s, bad = resolve({"editServer": {"debounceMs": 150}})
    assert s.debounce_ms == 150 and bad == []
    assert resolve(None) == (Settings(), [])
    _, bad = resolve([1, 2])
    assert bad == ["settings"]
