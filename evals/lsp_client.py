"""A small stdio LSP client (JSON-RPC over an asyncio subprocess) to drive the real server headlessly."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)


class LspError(RuntimeError):
    pass


def server_command(model: str, device: str, extra: Sequence[str] = ()) -> list[str]:
    """``python -m edit_server.cli --model M --device D`` (no subcommand = serve on stdio)."""
    return [sys.executable, "-m", "edit_server.cli", "--model", model, "--device", device, *extra]


def utf16_position(text: str, offset: int) -> dict[str, int]:
    """LSP position (line, UTF-16 character) of a Python str offset."""
    line = text.count("\n", 0, offset)
    start = text.rfind("\n", 0, offset) + 1
    seg = text[start:offset]
    return {"line": line, "character": len(seg.encode("utf-16-le")) // 2}


def offset_of(text: str, pos: dict[str, int]) -> int:
    """Python str offset of an LSP position (clamped to the line / text)."""
    line, char = int(pos["line"]), int(pos["character"])
    start = 0
    for _ in range(line):
        nl = text.find("\n", start)
        if nl < 0:
            return len(text)
        start = nl + 1
    end = text.find("\n", start)
    end = len(text) if end < 0 else end
    units = 0
    i = start
    while i < end and units < char:
        units += 2 if ord(text[i]) > 0xFFFF else 1
        i += 1
    return i


class LspClient:
    """Start a server process, ``initialize`` it, send requests/notifications, collect notifications."""

    def __init__(self, cmd: Sequence[str], *, cwd: Path | None = None, stderr_path: Path | None = None,
                 env: dict[str, str] | None = None) -> None:
        self.cmd = list(cmd)
        self.cwd = cwd
        self.stderr_path = stderr_path
        self.env = env
        self.proc: asyncio.subprocess.Process | None = None
        self._ids = itertools.count(1)
        self._pending: dict[int, asyncio.Future] = {}
        self._reader: asyncio.Task | None = None
        self._stderr_file: Any = None
        self.notifications: list[tuple[str, Any]] = []
        self._status = asyncio.Event()
        self.status: dict[str, Any] = {}
        self.capabilities: dict[str, Any] = {}

    async def start(self, root: Path, init_options: dict[str, Any], *, timeout: float = 120.0) -> None:
        env = dict(os.environ, **(self.env or {}))
        self._stderr_file = open(self.stderr_path, "ab") if self.stderr_path else None  # noqa: SIM115
        self.proc = await asyncio.create_subprocess_exec(
            *self.cmd, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            stderr=self._stderr_file or asyncio.subprocess.DEVNULL, cwd=self.cwd, env=env,
            limit=64 * 1024 * 1024)
        self._reader = asyncio.create_task(self._read_loop())
        uri = root.resolve().as_uri()
        res = await self.request("initialize", {
            "processId": os.getpid(), "rootUri": uri,
            "workspaceFolders": [{"uri": uri, "name": root.name}],
            "initializationOptions": init_options,
            "capabilities": {"textDocument": {"synchronization": {"didSave": True},
                                              "inlineCompletion": {"dynamicRegistration": False}},
                             "workspace": {"workspaceFolders": True, "configuration": True},
                             "general": {"positionEncodings": ["utf-16"]}},
            "clientInfo": {"name": "edit-server-evals", "version": "0.1"},
        }, timeout=timeout)
        self.capabilities = (res or {}).get("capabilities", {})
        await self.notify("initialized", {})

    async def wait_ready(self, timeout: float = 300.0, grace: float = 2.0) -> str:
        """Wait for ``$/editServer/status`` ready/error; servers that never send one get ``grace`` s."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        seen_any = False
        while True:
            state = self.status.get("state")
            if state in ("ready", "error"):
                if state == "error":
                    raise LspError(f"server reported an error: {self.status.get('message')}")
                return state
            seen_any = seen_any or bool(self.status)
            left = deadline - loop.time() if seen_any else min(grace, deadline - loop.time())
            if left <= 0:
                return str(state or "unknown")
            self._status.clear()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._status.wait(), left)
            if self.proc and self.proc.returncode is not None:
                raise LspError(f"server exited with code {self.proc.returncode}")

    async def request(self, method: str, params: Any, *, timeout: float = 120.0) -> Any:
        rid = next(self._ids)
        fut: asyncio.Future = asyncio.get_running_loop().create_future()
        self._pending[rid] = fut
        await self._send({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})
        try:
            return await asyncio.wait_for(fut, timeout)
        except asyncio.TimeoutError:
            await self.notify("$/cancelRequest", {"id": rid})
            raise LspError(f"{method}: no answer within {timeout:.0f} s") from None
        finally:
            self._pending.pop(rid, None)

    async def notify(self, method: str, params: Any) -> None:
        await self._send({"jsonrpc": "2.0", "method": method, "params": params})

    async def stop(self, timeout: float = 10.0) -> None:
        if self.proc is None:
            return
        try:
            if self.proc.returncode is None:
                await self.request("shutdown", None, timeout=timeout)
                await self.notify("exit", None)
                await asyncio.wait_for(self.proc.wait(), timeout)
        except (LspError, asyncio.TimeoutError, ConnectionError, BrokenPipeError):
            pass
        finally:
            if self.proc.returncode is None:
                self.proc.kill()
                await self.proc.wait()
            if self._reader:
                self._reader.cancel()
            if self._stderr_file:
                self._stderr_file.close()

    async def __aenter__(self) -> LspClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # ------------------------------------------------------------------ transport
    async def _send(self, msg: dict[str, Any]) -> None:
        assert self.proc and self.proc.stdin
        body = json.dumps(msg).encode("utf-8")
        self.proc.stdin.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
        await self.proc.stdin.drain()

    async def _read_loop(self) -> None:
        assert self.proc and self.proc.stdout
        out = self.proc.stdout
        try:
            while True:
                length = None
                while True:
                    line = await out.readline()
                    if not line:
                        raise EOFError
                    line = line.strip()
                    if not line:
                        break
                    k, _, v = line.decode("ascii", "replace").partition(":")
                    if k.lower() == "content-length":
                        length = int(v.strip())
                if length is None:
                    continue
                await self._dispatch(json.loads(await out.readexactly(length)))
        except (EOFError, asyncio.IncompleteReadError, ConnectionError):
            err = LspError(f"server closed the connection (exit code {self.proc.returncode})")
            for fut in self._pending.values():
                if not fut.done():
                    fut.set_exception(err)

    async def _dispatch(self, msg: dict[str, Any]) -> None:
        if "id" in msg and "method" not in msg:  # a response
            fut = self._pending.get(msg["id"])
            if fut and not fut.done():
                if "error" in msg:
                    fut.set_exception(LspError(f"{msg['error'].get('code')}: {msg['error'].get('message')}"))
                else:
                    fut.set_result(msg.get("result"))
            return
        method, params = msg.get("method", ""), msg.get("params")
        if "id" in msg:  # a request from the server: answer what editors answer
            result: Any = None
            if method == "workspace/configuration":
                result = [None for _ in (params or {}).get("items", [])]
            elif method == "workspace/workspaceFolders":
                result = []
            await self._send({"jsonrpc": "2.0", "id": msg["id"], "result": result})
            return
        self.notifications.append((method, params))
        if method == "$/editServer/status" and isinstance(params, dict):
            self.status = params
            self._status.set()
        elif method == "window/logMessage" and isinstance(params, dict):
            log.debug("server: %s", params.get("message"))


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
             {"textDocument": {"uri": uri}, "position": pos, "context": {"triggerKind": 1}}),
            ("textDocument/copilotInlineEdit",
             {"textDocument": {"uri": uri, "version": 1}, "position": pos})):
        try:
            await client.request(method, params, timeout=timeout)
        except Exception as e:  # noqa: BLE001 - warm-up only
            log.debug("warm-up %s failed: %s", method, e)
    await client.notify("textDocument/didClose", {"textDocument": {"uri": uri}})
