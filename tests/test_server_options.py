"""Settings: camelCase, per-key fallback with the bad keys named, nesting under "editServer"."""

from __future__ import annotations

import pytest

from edit_server.core.settings import Settings, build_settings, parse_set, resolve, to_wire


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
    assert sorted(b.split(":")[0] for b in bad) == ["debounceMs", "device", "gate.threshold", "maxTokens",
                                                    "nextEdit"]
    assert "debounceMs: Expected `int`, got `str`" in bad  # the message says why
    assert (s.max_tokens, s.device, s.gate.threshold, s.debounce_ms) == (10, "auto", 0.5, 0)
    assert s.gate.enabled is False  # the good sibling key still applies


def test_section_nesting_and_none() -> None:
    s, bad = resolve({"editServer": {"debounceMs": 150}})
    assert s.debounce_ms == 150 and bad == []
    assert resolve(None) == (Settings(), [])
    _, bad = resolve([1, 2])
    assert bad == ["settings: expected an object, got list"]


@pytest.mark.parametrize(("raw", "why"), [
    ({"contextBudget": 1}, "contextBudget: must be 0 (auto) or at least 256 tokens (got 1)"),
    ({"contextBudget": 40000}, "contextBudget: Expected `int` <= 32768"),
    ({"model": ""}, "model: must be"),
    ({"model": "a\x00b"}, "model: must be"),
    ({"limits": {"maxMessageBytes": 10}}, "limits.maxMessageBytes: Expected `int` >= 65536"),
    ({"http": {"maxQueue": 0}}, "http.maxQueue: Expected `int` >= 1"),
])
def test_ranges_are_checked_with_clear_messages(raw: dict, why: str) -> None:
    s, bad = resolve(raw)
    assert s == Settings() and len(bad) == 1 and bad[0].startswith(why)


def test_command_line_wins_over_client_options() -> None:
    cli = {"model": "tiny-random", "device": "cpu", "gate": {"threshold": 0.7}}
    s, bad = build_settings({"model": "default", "debounceMs": 20, "gate": {"enabled": False}}, cli)
    assert (s.model, s.device, s.debounce_ms, s.gate.threshold, s.gate.enabled) == (
        "tiny-random", "cpu", 20, 0.7, False)
    assert bad == ["model: set on the command line ('tiny-random'); the client's 'default' is ignored"]
    # an invalid client model neither overrides the command line nor reaches the loader
    s, bad = build_settings({"model": 42}, {"model": "tiny-random"})
    assert s.model == "tiny-random" and bad[0].startswith("model: Expected `str`")
    s, bad = build_settings({"model": 42})
    assert s.model == "default" and len(bad) == 1
    # later layers start from the current settings
    s2, _ = build_settings({"maxTokens": 8}, cli, s)
    assert (s2.max_tokens, s2.model, s2.debounce_ms) == (8, "tiny-random", s.debounce_ms)


def test_parse_set_nests_dotted_keys_and_reads_json() -> None:
    assert parse_set(["gate.threshold=0.7", "exclude=[\"*.log\"]", "model=tiny-random", "gate.enabled=false"]) == {
        "gate": {"threshold": 0.7, "enabled": False}, "exclude": ["*.log"], "model": "tiny-random"}
    with pytest.raises(ValueError, match="KEY=VALUE"):
        parse_set(["nothing"])
