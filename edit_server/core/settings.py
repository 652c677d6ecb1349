"""Typed server settings (msgspec, camelCase on the wire).

Raw client options (``initializationOptions`` / ``workspace/didChangeConfiguration``) are kept apart
from resolved settings: :func:`resolve` validates key by key, so one bad value falls back to its
default and is reported by name while every other key still applies.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec

MIN_CONTEXT_BUDGET = 256  # below this no prompt fits the template's markers and a useful window
MAX_CONTEXT_BUDGET = 32768  # contextBudget's ceiling; also the auto budget's cap on a GPU (serving/contexts.py)
Unit = Annotated[float, msgspec.Meta(ge=0.0, le=1.0)]
NonNeg = Annotated[int, msgspec.Meta(ge=0)]


class Gate(msgspec.Struct, rename="camel", kw_only=True):
    enabled: bool = True
    threshold: Unit = 0.5
    # per-kind thresholds learned by `edit-server align gate`: "" = its default file when present,
    # "off" = use ``threshold`` only, else a path
    calibration: str = ""
    # the KTO-aligned adapter whose implicit reward decides (`edit-server align kto`): "" = the current
    # local version when there is one, "off" = the confidence gate only, else a path (without suffix)
    kto: str = ""
    # precision of shown suggestions the KTO gate aims for: its per-kind reward threshold is the lowest one
    # whose held-out precision reaches this (the adapter's ``.gate.json`` curve); 0 = the target the
    # adapter was calibrated for (``align kto --target-precision``)
    kto_target_precision: Unit = 0.0


class Feature(msgspec.Struct, rename="camel", kw_only=True):
    enabled: bool = True


class NextEdit(Feature, rename="camel", kw_only=True):
    """Next edits (`edit_server.selectivity.select.pick` weighs the candidates, shows the best or none)."""

    # model rewrites of the editable region per request: the sampler's own + (n - 1) sampled alternatives
    # (`engine.api.RewriteCall.variant`; decoded one after another on the shared prompt KV); 1 = one rewrite
    # (the default: with the shipped model, sampled alternatives showed more wrong edits, docs/QUALITY.md)
    candidates: Annotated[int, msgspec.Meta(ge=1, le=8)] = 1
    # the editable region: "lines" — 6 lines above the cursor's line and 8 below (`engine.templates.
    # EDIT_REGION_ABOVE` / ``_BELOW``: what the model is trained on and the replays' truth is taken in) — or
    # "syntax": the largest syntax node around the cursor of at most 20 lines (`context.window.region_lines`)
    region: Literal["lines", "syntax"] = "lines"
    # one more candidate without the model: the user's last in-line substitution (a rename, a changed
    # literal) repeated at its other occurrences in the region (`edit_server.nextedit.repeat_edit`);
    # on: it finds held-out next edits exactly and shows nothing in quiet cases (docs/QUALITY.md)
    repeat_edit: bool = True
    # and another: the last edit's token-level changes carried over to the region's look-alike lines
    # (`edit_server.nextedit.analog_edit`); gated as ``edit:analog``. On its fixed score it showed too
    # many wrong edits; scored by the location model (``locator`` below) it earns its place
    analog_edit: bool = True
    # and another: the other copy of the line(s) the user just pasted, deleted (finishing a move;
    # `edit_server.nextedit.move_edit`); gated as ``edit:move``
    move_edit: bool = True
    # and another: a name the user's new import binds taken out of the region's other import of it (the whole
    # line when it binds nothing else; `edit_server.nextedit.import_edit`); gated as ``edit:import``
    import_edit: bool = True
    # the recent edits' token changes carried to the places that still hold the old text — in the region and,
    # with ``jumps``, the nearest place elsewhere in the document (`edit_server.nextedit`), and the second
    # half of a started edit (`edit_server.nextedit.complete_edit`, gated as ``edit:complete``); every rule's
    # candidate is then scored by the location model (``locator``: a model file, "" the shipped one) and
    # shown at its threshold — one scale for all of them
    carry_edit: bool = True
    jumps: bool = True
    locator: str = ""

    def rules(self) -> list[str]:
        """The model-free candidates on (`edit_server.nextedit.rules.RULES` keys), in ranking order."""
        on = (("repeat", self.repeat_edit), ("analog", self.analog_edit), ("move", self.move_edit), ("import", self.import_edit))
        return [name for name, enabled in on if enabled]


class Limits(msgspec.Struct, rename="camel", kw_only=True):
    """Input caps: what a careless or hostile client can make the server hold or parse."""

    max_message_bytes: Annotated[int, msgspec.Meta(ge=1 << 16, le=1 << 30)] = 32 << 20  # one JSON-RPC frame
    # larger documents are kept in sync but get no suggestions, no history diffs and no syntax tree
    max_document_chars: Annotated[int, msgspec.Meta(ge=1000, le=1 << 28)] = 2_000_000
    max_line_chars: Annotated[int, msgspec.Meta(ge=80, le=1 << 20)] = 2000  # longer lines are cut in prompts


class Http(msgspec.Struct, rename="camel", kw_only=True):
    """`edit-server http` only."""

    max_body_bytes: Annotated[int, msgspec.Meta(ge=1024, le=1 << 30)] = 4 << 20
    max_prompt_tokens: Annotated[int, msgspec.Meta(ge=64, le=1 << 20)] = 32768
    max_output_tokens: Annotated[int, msgspec.Meta(ge=1, le=4096)] = 256  # cap whatever max_tokens asks
    max_queue: Annotated[int, msgspec.Meta(ge=1, le=4096)] = 16  # requests waiting or running; more → 503
    # Host / Origin values accepted besides loopback (DNS-rebinding and CSRF protection)
    allowed_hosts: list[str] = msgspec.field(default_factory=list)
    allowed_origins: list[str] = msgspec.field(default_factory=list)
    # team server: bearer keys, "KEY" or "NAME:KEY" (NAME labels logs and /metrics; keys are never logged).
    # With none here, in apiKeyFile or in EDIT_SERVER_HTTP_TOKEN, no key is required.
    api_keys: list[str] = msgspec.field(default_factory=list)
    api_key_file: str = ""  # one key per line, same forms, '#' comments; re-read when the file changes
    # requests per minute per key (per client address when no keys are set); 0 = no limit; over → 429
    rate_limit_per_minute: Annotated[int, msgspec.Meta(ge=0, le=1_000_000)] = 0
    rate_limit_burst: Annotated[int, msgspec.Meta(ge=0, le=1_000_000)] = 0  # bucket size; 0 = one minute's worth
    metrics_auth: bool = True  # /metrics needs a key when keys are configured (/health never does)


class Remote(msgspec.Struct, rename="camel", kw_only=True):
    """The remote backend (engine/remote/): engine calls go to ``url``; the context builder (exclusions,
    secret redaction), the gate and the feedback store stay local. ``url`` "" = the local engine, and
    nothing is ever contacted."""

    url: str = ""  # http(s)://HOST:PORT[/PATH] of an `edit-server http`, an OpenAI-compatible server, SGLang
    # edit-server: its native /v1/engine/complete route (per-token confidences, next edit);
    # openai: /v1/completions (FIM prompt in fimFormat) + /v1/chat/completions (next edit);
    # sglang: its native /generate (fimFormat) + /v1/chat/completions
    kind: Literal["edit-server", "openai", "sglang"] = "edit-server"
    api_key: str = ""  # sent only as "Authorization: Bearer …", never logged; prefer apiKeyEnv
    api_key_env: str = ""  # the name of an environment variable holding the key
    model: str = ""  # the "model" field sent (the served model's name for openai / sglang)
    # how a FIM prompt is written for openai / sglang: the model's own FIM tokens, "suffix" (prompt +
    # suffix fields: servers with FIM support), "chat" (an instruction to a chat model, e.g. LLaDA2.x)
    fim_format: Literal["chat", "codellama", "deepseek", "qwen", "starcoder", "suffix"] = "qwen"
    connect_timeout_ms: Annotated[int, msgspec.Meta(ge=10, le=60_000)] = 2000
    timeout_ms: Annotated[int, msgspec.Meta(ge=100, le=600_000)] = 10_000  # the whole request
    # on a connection error, timeout, 5xx or bad answer: "local" runs the call on the local model (loaded
    # on the first failure, then kept), "none" gives no suggestion; the status names the failure either way
    fallback: Literal["local", "none"] = "local"
    retry_s: Annotated[float, msgspec.Meta(ge=0.0, le=3600.0)] = 30.0  # after a failure, skip the remote this long
    context_tokens: Annotated[int, msgspec.Meta(ge=0, le=1 << 20)] = 0  # the remote model's context; 0 = 8192


class Settings(msgspec.Struct, rename="camel", kw_only=True):
    model: str = "default"
    device: Literal["auto", "cpu", "cuda", "mps"] = "auto"
    # prompt tokens; 0 = auto: the model's context (capped at 32,768) on a GPU, 1,024 on a CPU
    context_budget: Annotated[int, msgspec.Meta(ge=0, le=MAX_CONTEXT_BUDGET)] = 0
    debounce_ms: Annotated[int, msgspec.Meta(ge=0, le=5000)] = 0
    max_tokens: Annotated[int, msgspec.Meta(ge=1, le=512)] = 64
    # lines of a multi-line completion; 0 = auto: 4 on a CPU (decoding stops there), no cap on a GPU / remote
    max_lines: Annotated[int, msgspec.Meta(ge=0, le=200)] = 0
    # where a completion may run over several lines: "auto" = where a block is expected (after a line
    # ending with an opener, on the blank line of an empty block) or when the user invoked it; "always" =
    # whenever nothing but closers is right of the cursor; "never" = one line
    multiline: Literal["always", "auto", "never"] = "auto"
    # ms a multi-line completion may take (from the request); then its finished lines are the answer;
    # 0 = auto: 1,200 on a CPU, 2,000 on a GPU / remote
    multiline_budget_ms: Annotated[int, msgspec.Meta(ge=0, le=60_000)] = 0
    # ms a single-line completion may decode (from its first token: a cold prefill is not counted); then
    # nothing is shown; 0 = auto: 600 on a CPU, 1,000 on a GPU / remote
    single_line_budget_ms: Annotated[int, msgspec.Meta(ge=0, le=60_000)] = 0
    inline_completion: Feature = msgspec.field(default_factory=Feature)
    next_edit: NextEdit = msgspec.field(default_factory=NextEdit)
    gate: Gate = msgspec.field(default_factory=Gate)
    exclude: list[str] = msgspec.field(default_factory=lambda: ["**/.env", "**/*.pem", "**/*.key"])
    # read the workspace's other files for context (definitions of the names used here, the files imported,
    # the git diff and co-changed files, the other open documents); false: only the current document and its
    # own edit history go into prompts, and no other file is read
    other_files: bool = True
    history_size: Annotated[int, msgspec.Meta(ge=0, le=64)] = 6
    # changes to the same place less than this apart extend one hunk of the edit history (Zed-style);
    # 0 = every change is its own hunk (eval replays: one hunk per replayed edit, whatever the timing)
    history_pause_ms: Annotated[int, msgspec.Meta(ge=0, le=600_000)] = 1000
    # eval runs: before each context build, finish the builder's background work (index the document's
    # definitions, refresh its git diff), so the prompt never depends on timing; slower: editors leave it off
    settle_context: bool = False
    auto_trigger_max_right: NonNeg = 8
    threads: Annotated[int, msgspec.Meta(ge=0, le=256)] = 0  # torch CPU threads; 0 = torch's default
    feedback_db: str = ""  # "" = user data dir; ":memory:" for tests
    suggestion_ttl_s: Annotated[float, msgspec.Meta(ge=0.0)] = 30.0
    limits: Limits = msgspec.field(default_factory=Limits)
    http: Http = msgspec.field(default_factory=Http)
    remote: Remote = msgspec.field(default_factory=Remote)


MAX_MODEL_SPEC = 1024


def _wire_names(cls: type[msgspec.Struct]) -> dict[str, str]:
    """camelCase wire name -> attribute name."""
    return {enc: attr for attr, enc in zip(cls.__struct_fields__, cls.__struct_encode_fields__, strict=True)}


def _check(key: str, value: Any) -> str | None:
    """Cross-field / value rules msgspec's per-type constraints cannot express (None = fine)."""
    if key == "contextBudget" and value and value < MIN_CONTEXT_BUDGET:
        return f"must be 0 (auto) or at least {MIN_CONTEXT_BUDGET} tokens (got {value})"
    if key == "model" and (not value or "\x00" in value or len(value) > MAX_MODEL_SPEC):
        return ('must be "default", "smollm2-bd3", "qwen2.5-coder-0.5b", "tiny-random", an HF directory, a .gguf '
                'file or ORG/NAME[@REVISION] '
                f"(got {value!r:.60})")
    if key == "remote.url" and value:
        from urllib.parse import urlsplit

        try:
            u = urlsplit(value)
            creds, port = u.username or u.password, u.port  # port: raises on a bad one
        except ValueError:
            return 'must be "" (local engine) or http(s)://HOST[:PORT][/PATH] (bad port)'
        if creds or "@" in u.netloc:  # never echoed: it may hold a password
            return "must not carry credentials (use remote.apiKey or remote.apiKeyEnv)"
        if u.scheme not in ("http", "https") or not u.hostname or u.query or u.fragment or port == 0:
            return f'must be "" (local engine) or http(s)://HOST[:PORT][/PATH] (got {value!r:.80})'
    if key == "remote.apiKeyEnv" and value and not value.replace("_", "").isalnum():
        return f"must be an environment variable name (got {value!r:.60})"
    return None


def _resolve_struct(cls: type[msgspec.Struct], raw: Any, base: msgspec.Struct, prefix: str,
                    bad: list[str]) -> msgspec.Struct:
    if not isinstance(raw, dict):
        bad.append(f"{prefix.rstrip('.') or 'settings'}: expected an object, got {type(raw).__name__}")
        return base
    names = _wire_names(cls)
    hints = {f.name: f.type for f in msgspec.structs.fields(cls)}
    updates: dict[str, Any] = {}
    for key, value in raw.items():
        attr = names.get(key)
        if attr is None:
            continue  # unknown keys are ignored (forward compatible), not an error
        sub = getattr(base, attr)
        if isinstance(sub, msgspec.Struct):
            updates[attr] = _resolve_struct(type(sub), value, sub, f"{prefix}{key}.", bad)
            continue
        try:
            v = msgspec.convert(value, hints[attr], strict=False)
        except msgspec.ValidationError as e:
            bad.append(f"{prefix}{key}: {e}")
            continue
        problem = _check(prefix + key, v)
        if problem:
            bad.append(f"{prefix}{key}: {problem}")
        else:
            updates[attr] = v
    return msgspec.structs.replace(base, **updates) if updates else base


def resolve(raw: Any, base: Settings | None = None) -> tuple[Settings, list[str]]:
    """Apply raw camelCase options over ``base`` (defaults). Returns (settings, problems): each problem
    names its key and why (``"contextBudget: must be 0 (auto) or at least 256 tokens (got 1)"``); a bad
    key keeps its previous value, every other key still applies."""
    base = base if base is not None else Settings()
    if raw is None:
        return base, []
    if isinstance(raw, dict) and isinstance(raw.get("editServer"), dict):
        raw = raw["editServer"]  # didChangeConfiguration often nests under the section name
    bad: list[str] = []
    out = _resolve_struct(Settings, raw, base, "", bad)
    assert isinstance(out, Settings)
    return out, bad


def build_settings(client: Any = None, cli: dict[str, Any] | None = None,
                   base: Settings | None = None) -> tuple[Settings, list[str]]:
    """The one place settings are made, for every front end: ``base`` (defaults) ← ``client`` options
    (initializationOptions, didChangeConfiguration, an HTTP config file) ← ``cli`` (command-line flags,
    camelCase keys). What the user put on the command line wins: a client option for the same key is
    reported and ignored, so an editor's default ``model`` never replaces ``--model`` (nor starts a
    download nobody asked for). Returns (settings, problems)."""
    settings, bad = resolve(client, base)
    if cli:
        settings, cli_bad = resolve(cli, settings)
        bad += [f"command line {b}" for b in cli_bad]
        inner = client.get("editServer", client) if isinstance(client, dict) else None
        if isinstance(inner, dict):
            for key in cli:
                if key in inner and inner[key] != cli[key] and not isinstance(cli[key], dict):
                    bad.append(f"{key}: set on the command line ({cli[key]!r}); the client's "
                               f"{inner[key]!r:.60} is ignored")
    return settings, bad


def parse_set(pairs: list[str] | None) -> dict[str, Any]:
    """``--set gate.threshold=0.7 --set exclude='["**/*.log"]'`` → nested camelCase dict (values are
    JSON when they parse as JSON, else strings)."""
    import json

    out: dict[str, Any] = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ValueError(f"--set expects KEY=VALUE, got {pair!r}")
        try:
            parsed: Any = json.loads(value)
        except ValueError:
            parsed = value
        node = out
        *parents, leaf = key.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = parsed
    return out


def to_wire(settings: Settings) -> dict[str, Any]:
    return msgspec.to_builtins(settings)
