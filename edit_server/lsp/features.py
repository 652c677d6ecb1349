"""LSP extras beside the core handlers (server.py): which clients get completion items instead of inline
completions, lenient client capabilities, and the status line's "why nothing shows" (a hidden suggestion).

- Clients that declare ``textDocument.inlineCompletion`` (Neovim ≥ 0.12, VS Code, lsp-mode with
  editors/emacs) get ghost text only; the others (Helix, Sublime LSP, LSP4IJ) are also offered
  ``textDocument/completion`` items built from the same FIM suggestion (`convert.completion_item`).
- Every suggestion the pipeline computes is reported to the server: a hidden one sets the
  ``hidden`` field of ``$/editServer/status`` (e.g. ``"fim hidden by the gate: score 0.08 < 0.50"``, or
  ``"no fim: model output empty after filtering"`` when the model left nothing — random weights emit
  no valid text), the next shown one clears it (``""``); status updates without it leave it as it was.
"""

from __future__ import annotations

from typing import Any

from lsprotocol import types as lsp

from edit_server.core.requests import Suggestion
from edit_server.core.settings import Settings
from edit_server.selectivity.thresholds import gate_threshold
from edit_server.serving.pipeline import EMPTY


def declares_inline_completion(initialize: Any) -> bool:
    """Whether raw ``initialize`` params declare ``capabilities.textDocument.inlineCompletion`` (present,
    even as null: lsp-mode writes an empty capability object as null)."""
    try:
        td = initialize["params"]["capabilities"]["textDocument"]
    except (KeyError, TypeError):
        return False
    return isinstance(td, dict) and "inlineCompletion" in td


def lenient_initialize(data: dict[str, Any], converter: Any) -> dict[str, Any]:
    """A raw ``initialize`` request whose client capabilities the strict LSP types reject, with each
    capability the types accept kept and the others dropped (LSP4IJ sends
    ``general.staleRequestSupport`` without its required ``retryOnContentModified``): one odd capability
    must not refuse the whole session. Returned unchanged when it structures as it is."""
    params = data.get("params")
    caps = params.get("capabilities") if isinstance(params, dict) else None
    if not isinstance(caps, dict):
        return data

    def ok(c: dict[str, Any]) -> bool:
        try:
            converter.structure({**params, "capabilities": c}, lsp.InitializeParams)
            return True
        except Exception:  # noqa: BLE001 - cattrs raises many kinds; any means "rejected"
            return False

    if ok(caps):
        return data
    kept: dict[str, Any] = {}
    for section, value in caps.items():
        if ok({section: value}):
            kept[section] = value
        elif isinstance(value, dict):
            kept[section] = {k: v for k, v in value.items() if ok({section: {k: v}})}
    return {**data, "params": {**params, "capabilities": kept}}


def hidden_reason(sug: Suggestion, settings: Settings) -> str:
    """Why ``sug`` is not shown ("" when it is), short enough for a status line."""
    if sug.show:
        return ""
    if sug.reason == "low score":
        threshold = sug.threshold if sug.threshold is not None else gate_threshold(settings, sug.kind)
        return f"{sug.kind} hidden by the gate: score {sug.score:.2f} < {threshold:.2f}"
    if sug.reason == EMPTY:
        return f"no {sug.kind}: {EMPTY}"
    return f"{sug.kind} hidden: {sug.reason}"
