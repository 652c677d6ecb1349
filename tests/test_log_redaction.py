"""The log filter: secrets never reach a log line, and a record logged from inside the redaction (a
library that logs while the detectors import) is withheld instead of recursing until the server hangs."""

from __future__ import annotations

import io
import logging

import pytest

from edit_server.cli.logs import RedactingFilter

KEY = "AKIA" + "QWERTYUIOPASDFGH"


def _logger() -> tuple[logging.Logger, io.StringIO]:
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.addFilter(RedactingFilter())
    log = logging.getLogger("test.redaction")
    log.handlers[:] = [handler]
    log.propagate = False
    log.setLevel(logging.DEBUG)
    return log, out


def test_secrets_in_messages_and_tracebacks_are_redacted() -> None:
    log, out = _logger()
    log.info("document says %s", f'KEY = "{KEY}"')
    try:
        raise ValueError(f"bad text {KEY}")
    except ValueError:
        log.exception("failed")
    text = out.getvalue()
    assert KEY not in text
    assert "document says" in text and "ValueError: bad text" in text


def test_a_record_logged_inside_the_redaction_is_withheld(monkeypatch: pytest.MonkeyPatch) -> None:
    log, out = _logger()
    import edit_server.context.secrets as secrets

    real = secrets.redact_any
    calls = []

    def logging_redact(text: str, *a: object, **k: object) -> str:
        calls.append(text)
        if len(calls) == 1:  # what detect-secrets' first import did: log from inside the filter
            log.warning("inner %s", KEY)
        return real(text, *a, **k)

    monkeypatch.setattr(secrets, "redact_any", logging_redact)
    log.info("outer")
    lines = out.getvalue().splitlines()
    assert lines == [RedactingFilter.WITHHELD, "outer"]
    assert len(calls) == 1


def test_a_failing_redaction_withholds_the_message(monkeypatch: pytest.MonkeyPatch) -> None:
    log, out = _logger()
    import edit_server.context.secrets as secrets

    def broken(*_: object, **__: object) -> str:
        raise ImportError("partially initialized module")

    monkeypatch.setattr(secrets, "redact_any", broken)
    log.info("text %s", KEY)
    assert out.getvalue().splitlines() == [RedactingFilter.WITHHELD]


def test_documents_quoted_in_message_dumps_are_redacted_in_place() -> None:
    """A document inside a JSON dump (escaped quotes and newlines) or a config file's unquoted values:
    the secret goes, the escapes around it stay as they were (the dump still reads as JSON)."""
    import json

    from edit_server.context.secrets import redact_any

    doc = 'x = "caf\u00e9"\npassword = "hunter2-Hunter"\ntoken = "Zx81Qm2LpV7kq"\n[db]\napi_key = Q8x2Lm9Pz7Vt4Rk1\n'
    for dumped in (json.dumps({"text": doc}), repr({"text": doc}), doc):
        out = redact_any("Sending data: " + dumped)
        assert not any(s in out for s in ("hunter2", "Zx81Qm2", "Q8x2Lm9")), out
        assert out.count("[REDACTED]") == 3 and "x = " in out
    out = redact_any(json.dumps({"text": doc}))
    assert json.loads(out)["text"].splitlines()[1:3] == ['password = "[REDACTED]"', 'token = "[REDACTED]"']
