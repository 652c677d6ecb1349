"""`edit-server bench lsp`: drive the real stdio server like an editor and time what the user waits for.

A scripted session over real files (this package's own sources, copied to a temp workspace):
``initialize`` → ready, a warm-up request on a scratch file, then per file: open it and ask once
(the cold request: no cached prompt for this document); at a few statement lines, retype the start
of the line in front of what follows it (the first request there, a "jump", prefills the window
around the new cursor position; then single-line requests while typing), accept the last
suggestion, press Enter (ask at the empty line) and type the start of a statement there (end of
line: multi-line requests), then remove that line; finally rename a parameter and ask for the next
edit. Typing goes in bursts of ``--chunk`` keystrokes at a fixed pace with a request after every
keystroke, not waiting for answers — as an editor does; the server supersedes older requests —
and each burst ends with a pause that waits for its last request (the "settle" latency: what a
user who stops typing waits for). Gate off, so every suggestion counts.

The session runs twice in one invocation: with the engine's default decoding and with
autoregressive decoding of the same weights (``EDIT_SERVER_DECODE=ar``) — the ratio between the two
is the figure to quote on a shared machine. An autoregressive base (``--model qwen2.5-coder-0.5b``)
runs once: its own decoding is already left to right. Per request kind: p50 / p95 of the client's round trip,
model steps, prompt tokens recomputed (from the server's INFO line per model call), and the server's
peak RSS.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from edit_server.cli.bench_lsp_report import format_table, ratios, summarize
from edit_server.cli.bench_lsp_script import (
    FILES,
    keystroke,
    kind_at,
    renames,
    saved_keys,
    sites,
    source_files,
    split_point,
)

CALL = re.compile(r"\b(fim|edit) (\S+): (\d+) prompt tokens \((\d+) cached\), (\d+) steps, (\d+) forwards, "
                  r"(\w+); prefill (\d+) ms, decode (\d+) ms(?:, batch \d+, (\d+) tokens)?")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("lsp", help="a scripted typing session against the real stdio server, vs AR decoding")
    p.add_argument("--model", default="default")
    p.add_argument("--device", default="cpu")
    p.add_argument("--threads", type=int, default=0, help="server torch threads (0 = torch's default)")
    p.add_argument("--files", type=int, default=2, help=f"files of {FILES} to use")
    p.add_argument("--file", action="append", default=[], metavar="PATH",
                   help="type in this file instead (repeatable; relative to the repository root or absolute)")
    p.add_argument("--sites", type=int, default=6, help="lines retyped per file (spread over the file)")
    p.add_argument("--renames", type=int, default=2, help="next-edit requests per file")
    p.add_argument("--max-chars", type=int, default=60, help="longest statement line to use")
    p.add_argument("--eol-chars", type=int, default=16, help="characters typed at the end of a new line")
    p.add_argument("--typing-ms", type=float, default=150.0,
                   help="time between keystrokes (150 ms: ~80 words per minute)")
    p.add_argument("--chunk", type=int, default=4, help="keystrokes per burst before the typist pauses")
    p.add_argument("--dwell-ms", type=float, default=0.0,
                   help="before each jump, the cursor rests at the new line this long ($/editServer/cursorRest, as "
                        "the Neovim and VS Code plugins send it): 0 = the typist starts at once")
    p.add_argument("--decode", default="", help="EDIT_SERVER_DECODE of the main run (default: the engine's)")
    p.add_argument("--no-ar", action="store_true", help="skip the autoregressive run")
    p.add_argument("--gate", action="store_true",
                   help="the server's gate on, as a user runs it (default off: every answer is the model's, so "
                        "its speed is measured; with the gate on a next edit whose rewrite no show threshold "
                        "could pass skips the model)")
    p.add_argument("--rounds", type=int, default=1, help="sessions per decoding, alternating main / AR")
    p.add_argument("--adapter", action="append", default=[], metavar="NAME=PATH",
                   help="also run the default model with this adapter (PATH without suffix: PATH.safetensors + "
                        "PATH.json; the server's EDIT_SERVER_ADAPTER), reported as main:NAME / ar:NAME; repeatable")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="a server setting for every run (README 'Settings'; the server's own --set), e.g. "
                        "--set otherFiles=false")
    p.add_argument("--timeout", type=float, default=600.0)
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.add_argument("--keep-logs", type=Path, default=None,
                   help="copy each session's server log (INFO: per build and per model call) into this folder")
    p.set_defaults(func=run)


# ---- the script (plain text, no LSP) --------------------------------------------------------------
# ---- the client (small functions over the project's one LSP client) -------------------------------
async def start_server(model: str, device: str, root: Path, log: Path, decode: str, threads: int,
                       timeout: float, adapter: str = "", gate: bool = False, sets: list[str] | None = None
                       ) -> tuple[Any, float]:
    from evals.lsp_client import LspClient, server_command

    env = {"EDIT_SERVER_DECODE": decode} if decode else {}
    if adapter:
        env["EDIT_SERVER_ADAPTER"] = adapter
    cmd = server_command(model, device, ["--log-file", str(log), "--log-level", "INFO",
                                         *(a for kv in sets or () for a in ("--set", kv))])
    client = LspClient(cmd, cwd=root, env=env, name="edit-server-bench")
    t0 = time.perf_counter()
    await client.start(root, {"gate": {"enabled": gate}, "feedbackDb": ":memory:", "threads": threads},
                       timeout=timeout)
    await client.wait_ready(timeout)
    return client, (time.perf_counter() - t0) * 1e3


async def open_doc(client: Any, uri: str, text: str) -> None:
    await client.notify("textDocument/didOpen", {"textDocument": {
        "uri": uri, "languageId": "python", "version": 1, "text": text}})


async def change(client: Any, uri: str, version: int, text: str, start: int, end: int, new: str) -> None:
    from evals.lsp_client import utf16_position

    await client.notify("textDocument/didChange", {
        "textDocument": {"uri": uri, "version": version},
        "contentChanges": [{"range": {"start": utf16_position(text, start), "end": utf16_position(text, end)},
                            "text": new}]})


async def rest(client: Any, uri: str, text: str, offset: int) -> None:
    from evals.lsp_client import utf16_position

    await client.notify("$/editServer/cursorRest", {"textDocument": {"uri": uri},
                                                    "position": utf16_position(text, offset)})


async def inline(client: Any, uri: str, text: str, offset: int, invoked: bool, timeout: float) -> Any:
    from evals.lsp_client import utf16_position

    return await client.request("textDocument/inlineCompletion", {
        "textDocument": {"uri": uri}, "position": utf16_position(text, offset),
        "context": {"triggerKind": 1 if invoked else 2}}, timeout=timeout)


async def next_edit(client: Any, uri: str, version: int, text: str, offset: int, timeout: float) -> Any:
    from evals.lsp_client import utf16_position

    return await client.request("textDocument/copilotInlineEdit", {
        "textDocument": {"uri": uri, "version": version}, "position": utf16_position(text, offset)},
        timeout=timeout)


async def accept(client: Any, item: dict[str, Any]) -> None:
    cmd = item.get("command") or {}
    if cmd.get("command"):
        await client.request("workspace/executeCommand",
                             {"command": cmd["command"], "arguments": cmd.get("arguments", [])})


def rss_mb(client: Any) -> dict[str, float]:
    """The server process' current and peak resident memory (Linux /proc)."""
    out: dict[str, float] = {}
    proc = client.proc
    try:
        for line in Path(f"/proc/{proc.pid}/status").read_text().splitlines():
            if line.startswith(("VmRSS:", "VmHWM:")):
                out["rss_mb" if line.startswith("VmRSS") else "peak_rss_mb"] = int(line.split()[1]) / 1024
    except (OSError, AttributeError, ValueError):
        pass
    return out


# ---- one session ---------------------------------------------------------------------------------
@dataclass
class Sample:
    kind: str
    ms: float
    shown: bool = False  # a suggestion came back
    final: bool = True  # the request after the last keystroke of a burst (what the user waits for)
    call: dict[str, Any] | None = None  # an awaited request's model call (the server's log line)
    # a shown suggestion while retyping a line (None: no suggestion, or no known truth — an empty line, a new
    # line, a next edit): whether it types exactly what the typist was about to, and how many keys it saves
    right: bool | None = None
    saved: int | None = None


@dataclass
class Doc:
    uri: str
    text: str
    version: int = 1


@dataclass
class Session:
    client: Any
    log: Path
    timeout: float
    typing_s: float
    chunk: int = 4
    dwell_s: float = 0.0
    samples: list[Sample] = field(default_factory=list)
    calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)  # (kind, model call)
    _pos: int = 0

    def _take_calls(self, kind: str) -> list[dict[str, Any]]:
        """The model calls the server logged since the last look, attributed to ``kind``."""
        try:
            with open(self.log, encoding="utf-8", errors="replace") as f:
                f.seek(self._pos)
                chunk = f.read()
                self._pos = f.tell()
        except OSError:
            return []
        keys = ("call", "uri", "prompt_tokens", "cached_tokens", "steps", "forwards", "finish",
                "prefill_ms", "decode_ms", "tokens")
        got = [dict(zip(keys, (m[0], m[1], *map(int, m[2:6]), m[6], *map(int, m[7:9]), int(m[9] or 0)),
                        strict=True)) for m in CALL.findall(chunk)]
        self.calls += [(kind, c) for c in got]
        return got

    async def edit(self, d: Doc, start: int, end: int, new: str) -> None:
        d.version += 1
        await change(self.client, d.uri, d.version, d.text, start, end, new)
        d.text = d.text[:start] + new + d.text[end:]

    async def _inline(self, uri: str, text: str, offset: int, kind: str, invoked: bool) -> tuple[Sample, Any]:
        t0 = time.perf_counter()
        res = await inline(self.client, uri, text, offset, invoked, self.timeout)
        items = (res or {}).get("items", []) if isinstance(res, dict) else (res or [])
        return Sample(kind, (time.perf_counter() - t0) * 1e3, bool(items)), items[0] if items else None

    async def ask(self, d: Doc, offset: int, kind: str | None = None, invoked: bool = False) -> dict | None:
        """One request, awaited (the user pauses here)."""
        kind = kind or kind_at(d.text, offset)
        sample, item = await self._inline(d.uri, d.text, offset, kind, invoked)
        calls = self._take_calls(kind)
        sample.call = calls[-1] if calls else None
        self.samples.append(sample)
        return item

    async def type_text(self, d: Doc, cur: int, text: str, judge: bool = False) -> tuple[int, dict | None]:
        """Type ``text`` in bursts of ``chunk`` characters, each followed by a pause for its answer.
        ``judge``: ``text`` retypes what the author wrote: each suggestion is judged against what is left of it."""
        item = None
        for i in range(0, len(text), self.chunk):
            cur, got = await self.burst(d, cur, text[i:i + self.chunk], text[i + self.chunk:] if judge else None)
            item = got or item
        return cur, item

    async def burst(self, d: Doc, cur: int, text: str, upcoming: str | None = None) -> tuple[int, dict | None]:
        """Type ``text`` at ``cur`` at typing speed with auto-closed brackets, a request after every
        change, without waiting for answers (the server supersedes the older ones), then wait. ``upcoming``:
        what the typist types after ``text`` (each answer judged: `saved_keys`); None: not judged."""
        tasks: list[asyncio.Task] = []
        asked: list[tuple[str, int, str]] = []  # the document and cursor each request saw, what was left to type
        due = time.perf_counter()
        for k, ch in enumerate(text):
            due += self.typing_s
            await asyncio.sleep(max(0.0, due - time.perf_counter()))
            ins = keystroke(d.text, cur, ch)
            if ins is None:
                cur += 1  # typing over the auto-closed bracket: no change, no request
                continue
            await self.edit(d, cur, cur, ins)
            cur += 1
            asked.append((d.text, cur, text[k + 1:] + (upcoming or "")))
            tasks.append(asyncio.create_task(self._inline(d.uri, d.text, cur, kind_at(d.text, cur), False)))
        done = await asyncio.gather(*tasks)
        for i, (sample, item) in enumerate(done):
            sample.final = i == len(done) - 1
            if upcoming is not None:
                snap, at, left = asked[i]
                sample.saved = saved_keys(snap, at, item, left)
                # nothing left to type: whatever it adds is wrong
                sample.right = None if sample.saved is None else 0 < sample.saved == len(left)
            self.samples.append(sample)
        kinds = [sample.kind for sample, _ in done]
        self._take_calls(max(set(kinds), key=kinds.count) if kinds else "end-of-line")
        items = [item for _, item in done if item is not None]
        return cur, items[-1] if items else None

    async def retype(self, d: Doc, line_no: int, eol_chars: int) -> None:
        """At ``x = f(a, b)``: delete ``x = f(a`` and type it back (mid-line: single-line requests),
        accept the last suggestion; then Enter at the end of the line (an empty line: ask), type the
        start of a similar statement there (end-of-line requests) and remove that line again."""
        start = sum(len(ln) + 1 for ln in d.text.split("\n")[:line_no])
        line = d.text.split("\n")[line_no]
        indent = len(line) - len(line.lstrip())
        head = line[indent:split_point(line)]
        if self.dwell_s > 0:  # the cursor arrives, the plugin says where it rests, the user reads a moment
            await rest(self.client, d.uri, d.text, start + indent)
            await asyncio.sleep(self.dwell_s)
        await self.edit(d, start + indent, start + indent + len(head), "")
        await self.ask(d, start + indent, kind="jump")  # the cursor moved here: a new window to prefill
        _, typed = await self.type_text(d, start + indent, head, judge=True)
        if typed is not None:
            await accept(self.client, typed)
        end = start + len(line)
        await self.edit(d, end, end, "\n" + line[:indent])
        await self.ask(d, end + 1 + indent)
        await self.type_text(d, end + 1 + indent, line[indent:indent + eol_chars])
        await self.edit(d, end, d.text.find("\n", end + 1) if "\n" in d.text[end + 1:] else len(d.text), "")

    async def rename(self, d: Doc, offset: int, name: str) -> None:
        await self.edit(d, offset, offset + len(name), name + "_2")
        t0 = time.perf_counter()
        res = await next_edit(self.client, d.uri, d.version, d.text, offset + len(name) + 2, self.timeout)
        calls = self._take_calls("next-edit")
        self.samples.append(Sample("next-edit", (time.perf_counter() - t0) * 1e3,
                                   bool((res or {}).get("edits")), True, calls[-1] if calls else None))


async def run_session(args: argparse.Namespace, decode: str, adapter: str = ""
                      ) -> tuple[Session, dict[str, float], list[str]]:
    root = Path(tempfile.mkdtemp(prefix="edit-server-bench-lsp-"))
    log = root / "server.log"
    files = source_files(args.files, args.file)
    try:
        for f in files:
            shutil.copy(f, root / f.name)
        (root / "scratch.py").write_text("def add(a, b):\n    return a + b\n", encoding="utf-8")
        client, load_ms = await start_server(args.model, args.device, root, log, decode, args.threads,
                                             args.timeout, adapter, gate=args.gate, sets=args.set)
        s = Session(client, log, args.timeout, args.typing_ms / 1e3, args.chunk, args.dwell_ms / 1e3)
        s.samples.append(Sample("load", load_ms))
        try:
            scratch = Doc((root / "scratch.py").as_uri(), (root / "scratch.py").read_text())
            await open_doc(client, scratch.uri, scratch.text)
            await s.ask(scratch, len(scratch.text) - 1, kind="warm-up", invoked=True)
            for f in files:
                d = Doc((root / f.name).as_uri(), (root / f.name).read_text(encoding="utf-8"))
                await open_doc(client, d.uri, d.text)
                lines = sites(d.text, args.sites, args.max_chars)
                first = lines[0] if lines else 0
                cold_at = d.text.find("(", sum(len(ln) + 1 for ln in d.text.split("\n")[:first])) + 1
                await s.ask(d, max(1, cold_at), kind="cold", invoked=True)
                for ln in lines:
                    await s.retype(d, ln, args.eol_chars)
                for off, name in renames(d.text, args.renames):
                    await s.rename(d, off, name)
            mem = rss_mb(client)
        finally:
            await client.stop()
            if args.keep_logs is not None and log.is_file():
                args.keep_logs.mkdir(parents=True, exist_ok=True)
                n = len(list(args.keep_logs.glob("*.log")))
                tag = (decode or "main") + (f"-{Path(adapter).name}" if adapter else "")
                shutil.copy(log, args.keep_logs / f"{n + 1:02d}-{tag}.log")
        return s, mem, [f.name for f in files]
    finally:
        shutil.rmtree(root, ignore_errors=True)


def autoregressive(model: str, device: str) -> bool:
    """Whether ``model`` (``default``: the tier it means here, `engine.tiers`) already decodes left to right:
    an autoregressive base (`engine.loading.ar_base`), whose main run is the AR run."""
    from engine.loading.ar_base import is_ar_base
    from engine.specs import resolve_device
    from engine.tiers import DEFAULT, default_model

    kind = resolve_device(device).type
    return is_ar_base(default_model(kind, quiet=True).model if model.strip() == DEFAULT else model)


def adapter_runs(args: argparse.Namespace) -> dict[str, tuple[str, str]]:
    """Run name -> (EDIT_SERVER_DECODE, adapter path): main (and ar) for the shipped adapter, then main:NAME
    (and ar:NAME) for each ``--adapter NAME=PATH``."""
    out: dict[str, tuple[str, str]] = {}
    for spec in ["=", *args.adapter]:
        name, _, path = spec.partition("=")
        if spec != "=" and (not name or not path):
            raise SystemExit(f"bench lsp: --adapter {spec!r}: expected NAME=PATH")
        tag = f":{name}" if name else ""
        out["main" + tag] = (args.decode, path)
        if not args.no_ar:
            out["ar" + tag] = ("ar", path)
    return out


def run(args: argparse.Namespace) -> int:
    from edit_server.cli.bench_common import emit, machine
    from engine.specs import resolve_device

    t0 = time.perf_counter()
    report: dict[str, Any] = {"model": args.model, "device": args.device, "machine": machine(resolve_device(args.device)),
                              "settings": {k: getattr(args, k) for k in (
                                  "files", "sites", "renames", "max_chars", "eol_chars", "typing_ms", "chunk", "dwell_ms", "threads", "rounds",
                                  "gate", "set", "file")}}
    if not args.no_ar and autoregressive(args.model, args.device):
        args.no_ar = True  # the same decoding twice
        report["note"] = f"{args.model} decodes left to right: no separate AR run"
    runs = adapter_runs(args)
    got: dict[str, list[tuple[Session, dict[str, float], list[str]]]] = {name: [] for name in runs}
    for _ in range(max(1, args.rounds)):  # alternating, so all see the same machine
        for name, (decode, adapter) in runs.items():
            got[name].append(asyncio.run(run_session(args, decode, adapter)))
    for name, (decode, adapter) in runs.items():
        sessions = got[name]
        samples = [x for s, _, _ in sessions for x in s.samples]
        calls = [c for s, _, _ in sessions for c in s.calls]
        report[name] = {
            "decode": decode or "engine default", "adapter": adapter or "shipped", "rounds": len(sessions),
            "files": sessions[0][2],
            "memory": {k: max(m.get(k, 0.0) for _, m, _ in sessions) for k in ("rss_mb", "peak_rss_mb")},
            **summarize(samples, calls),
            "samples": [{"kind": x.kind, "ms": round(x.ms, 1), "shown": x.shown, "final": x.final, "right": x.right,
                         "saved": x.saved,
                         **(x.call or {})} for x in samples],
            "calls": [{"kind": k, **c} for k, c in calls]}
    if "ar" in report:
        report["ratio"] = ratios(report["main"], report["ar"])
    report["runs"] = list(runs)
    report["wall_s"] = round(time.perf_counter() - t0, 1)
    return emit(report, args.json, format_table)
