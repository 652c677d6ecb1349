"""`edit-server demo`: start the real server over stdio, replay a short editing session, print what
it suggests and how long each request took.

The session: open a file, type a return expression keystroke by keystroke (inline completion after
each key, as an editor would), then rename a parameter and ask for the next edit (copilotInlineEdit),
which should propagate the rename into the function body.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from lsprotocol import types as lsp
from pygls.lsp.client import LanguageClient

SOURCE = '''def area(width, height):
    """Area of a rectangle."""
    return width * height


def perimeter(width, height):
    return
'''.replace("return\n", "return \n")
TYPED = "2 * (w"


def _pos(text: str, off: int) -> lsp.Position:
    line = text.count("\n", 0, off)
    return lsp.Position(line=line, character=off - (text.rfind("\n", 0, off) + 1))  # ASCII-only demo text


class Session:
    def __init__(self, client: LanguageClient, uri: str, text: str) -> None:
        self.client, self.uri, self.text, self.version = client, uri, text, 1

    def edit(self, start: int, end: int, new: str) -> None:
        a, b = _pos(self.text, start), _pos(self.text, end)
        self.text = self.text[:start] + new + self.text[end:]
        self.version += 1
        self.client.text_document_did_change(lsp.DidChangeTextDocumentParams(
            text_document=lsp.VersionedTextDocumentIdentifier(uri=self.uri, version=self.version),
            content_changes=[lsp.TextDocumentContentChangePartial(range=lsp.Range(start=a, end=b), text=new)]))

    async def complete(self, off: int) -> tuple[str | None, float]:
        t0 = time.perf_counter()
        res = await self.client.text_document_inline_completion_async(lsp.InlineCompletionParams(
            text_document=lsp.TextDocumentIdentifier(uri=self.uri), position=_pos(self.text, off),
            context=lsp.InlineCompletionContext(trigger_kind=lsp.InlineCompletionTriggerKind.Automatic)))
        ms = (time.perf_counter() - t0) * 1000
        items = res.items if isinstance(res, lsp.InlineCompletionList) else (res or [])
        if not items:
            return None, ms
        it = items[0]
        text = it.insert_text if isinstance(it.insert_text, str) else it.insert_text.value
        return f"{text!r} (score {it.command.arguments[0]['score']:.2f})", ms

    async def next_edit(self, off: int) -> tuple[list[Any], float]:
        t0 = time.perf_counter()
        p = _pos(self.text, off)
        res = await self.client.protocol.send_request_async("textDocument/copilotInlineEdit", {
            "textDocument": {"uri": self.uri, "version": self.version},
            "position": {"line": p.line, "character": p.character}})
        return list(res.edits), (time.perf_counter() - t0) * 1000


async def replay(model: str, device: str, gate: bool, out: Any = sys.stdout,
                 server_log: str | None = None) -> int:
    def say(msg: str) -> None:
        print(msg, file=out, flush=True)

    client = LanguageClient("edit-server-demo", "1")
    ready: asyncio.Future = asyncio.get_running_loop().create_future()

    @client.feature("$/editServer/status")
    def _status(_c: LanguageClient, params: Any) -> None:
        say(f"  [status] {params.state}: {params.message}")
        if params.state in ("ready", "error") and not ready.done():
            ready.set_result(params.state)

    @client.feature("didChangeStatus")
    def _copilot_status(_c: LanguageClient, _params: Any) -> None:
        pass

    log_args = ["--log-file", server_log, "--log-level", "INFO"] if server_log else []
    await client.start_io(sys.executable, "-m", "edit_server", "--model", model, "--device", device, *log_args)
    workdir = Path(tempfile.mkdtemp(prefix="edit-server-demo-"))
    uri = (workdir / "shapes.py").as_uri()
    say(f"edit-server demo: model={model!r} device={device!r} gate={'on' if gate else 'off'}")
    await client.initialize_async(lsp.InitializeParams(
        capabilities=lsp.ClientCapabilities(), root_uri=workdir.as_uri(),
        initialization_options={"model": model, "device": device, "gate": {"enabled": gate},
                                "feedbackDb": ":memory:"}))
    client.initialized(lsp.InitializedParams())
    t0 = time.perf_counter()
    state = await asyncio.wait_for(ready, 600)
    say(f"  model {state} after {time.perf_counter() - t0:.1f} s")
    rc = 0
    if state == "ready":
        client.text_document_did_open(lsp.DidOpenTextDocumentParams(text_document=lsp.TextDocumentItem(
            uri=uri, language_id="python", version=1, text=SOURCE)))
        s = Session(client, uri, SOURCE)
        say("\n1) typing in perimeter(): inline completion after every keystroke")
        cur = s.text.rindex("return ") + len("return ")
        for ch in TYPED:
            s.edit(cur, cur, ch)
            cur += 1
            sug, ms = await s.complete(cur)
            line = s.text[s.text.rfind("\n", 0, cur) + 1 : cur]
            say(f"  {ms:7.0f} ms  {line!r:28} -> {sug or '(nothing shown)'}")
        say("\n2) rename width -> w in area()'s signature, then ask for the next edit")
        sig = s.text.index("width")
        s.edit(sig, sig + len("width"), "w")
        edits, ms = await s.next_edit(sig + 1)
        say(f"  {ms:7.0f} ms  {len(edits)} edit(s)")
        for e in edits:
            r = e.range
            say(f"    {r.start.line + 1}:{r.start.character + 1}-{r.end.line + 1}:{r.end.character + 1} "
                f"-> {e.text!r}")
    else:
        say("  the model did not load; try --model tiny-random (random weights) to see the plumbing")
        rc = 1
    await client.shutdown_async(None)
    client.exit(None)
    await client.stop()
    return rc


def main(model: str = "default", device: str = "auto", gate: bool = True, server_log: str | None = None) -> int:
    return asyncio.run(replay(model, device, gate, server_log=server_log))
