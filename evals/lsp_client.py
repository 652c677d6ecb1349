"""The evaluation runners' LSP client: the project's one client (edit_server/lsp/client.py, pygls), plus
the warm-up the runners do before measuring."""

from __future__ import annotations

import logging
from pathlib import Path

from edit_server.lsp.client import (
    TRIGGER_KINDS,
    LspClient,
    LspError,
    offset_of,
    server_command,
    utf16_position,
)

__all__ = ["TRIGGER_KINDS", "LspClient", "LspError", "offset_of", "server_command", "utf16_position", "warm_up"]
log = logging.getLogger(__name__)


async def warm_up(client: LspClient, root: Path, timeout: float) -> None:
    """One untimed request of each kind on a scratch file, so no measured request pays first-call costs."""
    f = root / "_warmup" / "warmup.py"
    f.parent.mkdir(parents=True, exist_ok=True)
    text = "def add(a, b):\n    return a + b\n\n\ndef mul(a, b):\n    return \n"
    f.write_text(text, encoding="utf-8")
    uri = f.resolve().as_uri()
    pos = utf16_position(text, len(text) - 1)
    await client.notify("textDocument/didOpen", {"textDocument": {
        "uri": uri, "languageId": "python", "version": 1, "text": text}})
    for method, params in (
            ("textDocument/inlineCompletion",
             {"textDocument": {"uri": uri}, "position": pos, "context": {"triggerKind": TRIGGER_KINDS["invoked"]}}),
            ("textDocument/copilotInlineEdit",
             {"textDocument": {"uri": uri, "version": 1}, "position": pos})):
        try:
            await client.request(method, params, timeout=timeout)
        except Exception as e:  # noqa: BLE001 - warm-up only
            log.debug("warm-up %s failed: %s", method, e)
    f.unlink(missing_ok=True)  # gone before the close: the server forgets it (no warm-up code in any index)
    await client.notify("textDocument/didClose", {"textDocument": {"uri": uri}})
