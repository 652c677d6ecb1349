"""The project's one LSP client (pygls's `LanguageClient` over the server's stdio): the evaluation runners, the
demo and the benchmarks drive the real server through it, plus the warm-up the runners do before measuring.

It lives in evals/, below the front ends that also use it (`edit_server/cli/demo.py`, `bench_lsp.py`) and above
the server, which it starts as a subprocess and never imports: evals/ imports nothing of `edit_server`
(tests/test_layering.py). Positions are converted by `engine.positions`, the arithmetic the server's own wire
conversions use."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from lsprotocol.types import METHOD_TO_TYPES, InlineCompletionTriggerKind
from pygls.lsp.client import LanguageClient

from engine import options
from engine.positions import offset_to_position, position_to_offset

# a client's names for the inline completion's ``context.triggerKind``: typing (automatic) or asked for (invoked)
TRIGGER_KINDS = {"invoked": int(InlineCompletionTriggerKind.Invoked),
                 "automatic": int(InlineCompletionTriggerKind.Automatic)}

log = logging.getLogger(__name__)
STATUS = "$/editServer/status"


# environment variables naming a path, made absolute when the server is started in another directory (an eval
# case's workspace): relative there, `EDIT_SERVER_ADAPTER=runs/qwen-adapter/default edit-server eval replay …`
# names nothing ("adapter file not found")
PATH_VARS = (options.ADAPTER, options.BASE_WHEEL, options.SHARED)


class LspError(RuntimeError):
    pass


def server_command(model: str, device: str, extra: Sequence[str] = ()) -> list[str]:
    """``python -m edit_server.cli --model M --device D`` (no subcommand = serve on stdio)."""
    return [sys.executable, "-m", "edit_server.cli", "--model", model, "--device", device, *extra]


def server_env(extra: dict[str, str] | None, cwd: Path | None) -> dict[str, str]:
    """The server's environment: this process's, ``extra`` over it; started in another directory (``cwd``), the
    relative paths of `PATH_VARS` made absolute — they meant this process's directory."""
    env = dict(os.environ, **(extra or {}))
    if cwd is not None:
        for var in PATH_VARS:
            if env.get(var) and not os.path.isabs(env[var]):
                env[var] = os.path.abspath(env[var])
    return env


def utf16_position(text: str, offset: int) -> dict[str, int]:
    """LSP position (line, UTF-16 character) of a Python str offset."""
    line, ch = offset_to_position(text, offset)
    return {"line": line, "character": ch}


def offset_of(text: str, pos: dict[str, int]) -> int:
    """Python str offset of an LSP position (clamped to the line / text)."""
    return position_to_offset(text, int(pos["line"]), int(pos["character"]))


def plain(obj: Any, converter: Any = None) -> Any:
    """pygls values (lsprotocol attrs classes, its namedtuple ``Object``s) -> plain JSON values."""
    if hasattr(obj, "__attrs_attrs__") and converter is not None:
        return plain(converter.unstructure(obj))
    if hasattr(obj, "_asdict"):
        return {k: plain(v, converter) for k, v in obj._asdict().items()}
    if isinstance(obj, dict):
        return {k: plain(v, converter) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [plain(v, converter) for v in obj]
    return obj


class LspClient:
    """Start a server process, ``initialize`` it, send requests/notifications, collect notifications.

    ``stderr_path``: the server's stderr is copied there (else discarded) — pygls pipes it, and a pipe
    nobody reads would block a chatty server. ``on_status``: called with each ``$/editServer/status``
    (plain JSON) as it arrives."""

    def __init__(self, cmd: Sequence[str], *, cwd: Path | None = None, stderr_path: Path | None = None,
                 env: dict[str, str] | None = None, name: str = "edit-server-client",
                 on_status: Callable[[dict[str, Any]], None] | None = None) -> None:
        self.cmd = list(cmd)
        self.cwd = cwd
        self.stderr_path = stderr_path
        self.env = env
        self.client = LanguageClient(name, "1")
        self.notifications: list[tuple[str, Any]] = []
        self.status: dict[str, Any] = {}
        self.capabilities: dict[str, Any] = {}
        self._status = asyncio.Event()
        self._drain: asyncio.Task | None = None
        conv = self.client.protocol._converter

        @self.client.feature(STATUS)
        def _status(_c: LanguageClient, params: Any) -> None:
            self.status = plain(params, conv)
            self.notifications.append((STATUS, self.status))
            self._status.set()
            if on_status is not None:
                on_status(self.status)

        for method in ("didChangeStatus", "window/showMessage", "window/logMessage", "$/progress"):
            self.client.feature(method)(self._recorder(method))

        @self.client.feature("workspace/configuration")
        def _configuration(_c: LanguageClient, params: Any) -> list[None]:
            return [None for _ in getattr(params, "items", [])]

        @self.client.feature("window/workDoneProgress/create")
        def _progress_create(_c: LanguageClient, params: Any) -> None:
            self.notifications.append(("window/workDoneProgress/create", plain(params, conv)))

        @self.client.feature("client/registerCapability")
        def _register(_c: LanguageClient, params: Any) -> None:  # recorded; a client that asked for it acts
            self.notifications.append(("client/registerCapability", plain(params, conv)))

    def _recorder(self, method: str) -> Any:
        conv = self.client.protocol._converter

        def record(_c: LanguageClient, params: Any) -> None:
            self.notifications.append((method, plain(params, conv)))

        return record

    @property
    def proc(self) -> asyncio.subprocess.Process | None:
        """The server process (None before ``start``)."""
        return self.client._server

    @property
    def returncode(self) -> int | None:
        server = self.client._server
        return None if server is None else server.returncode

    async def start(self, root: Path, init_options: dict[str, Any], *, timeout: float = 120.0,
                    workspace_capabilities: dict[str, Any] | None = None) -> None:
        """``workspace_capabilities``: more of the client's ``capabilities.workspace`` (e.g. a test that
        answers file-watcher registrations declares ``didChangeWatchedFiles``)."""
        env = server_env(self.env, self.cwd)
        await self.client.start_io(*self.cmd, cwd=self.cwd, env=env, limit=64 * 1024 * 1024)
        self._drain = asyncio.create_task(self._copy_stderr())
        uri = root.resolve().as_uri()
        res = await self.request("initialize", {
            "processId": os.getpid(), "rootUri": uri,
            "workspaceFolders": [{"uri": uri, "name": root.name}],
            "initializationOptions": init_options,
            "capabilities": {"textDocument": {"synchronization": {"didSave": True},
                                              "inlineCompletion": {"dynamicRegistration": False}},
                             "workspace": {"workspaceFolders": True, "configuration": True,
                                           **(workspace_capabilities or {})},
                             "window": {"workDoneProgress": True},
                             "general": {"positionEncodings": ["utf-16"]}},
            "clientInfo": {"name": "edit-server-client", "version": "1"},
        }, timeout=timeout)
        self.capabilities = (res or {}).get("capabilities", {})
        await self.notify("initialized", {})

    async def _copy_stderr(self) -> None:
        server = self.client._server
        if server is None or server.stderr is None:
            return
        out = open(self.stderr_path, "ab") if self.stderr_path else None  # noqa: SIM115
        try:
            while chunk := await server.stderr.read(65536):
                if out is not None:
                    out.write(chunk)
                    out.flush()
        finally:
            if out is not None:
                out.close()

    async def wait_ready(self, timeout: float = 300.0, grace: float = 2.0) -> str:
        """Wait for ``$/editServer/status`` ready/degraded/error; servers that never send one get
        ``grace`` s. An error status raises :class:`LspError`."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        seen_any = False
        while True:
            state = self.status.get("state")
            if state == "error":
                raise LspError(f"server reported an error: {self.status.get('message')}")
            if state in ("ready", "degraded"):
                return state
            seen_any = seen_any or bool(self.status)
            left = deadline - loop.time() if seen_any else min(grace, deadline - loop.time())
            if left <= 0:
                return str(state or "unknown")
            self._status.clear()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._status.wait(), left)
            if self.returncode is not None:
                raise LspError(f"server exited with code {self.returncode}")

    def _typed(self, method: str, params: Any) -> Any:
        """Plain params -> the lsprotocol type of a standard method (pygls's client hooks expect it)."""
        types = METHOD_TO_TYPES.get(method)
        if types is None or types[2] is None or params is None or not isinstance(params, dict):
            return params
        return self.client.protocol._converter.structure(params, types[2])

    async def request(self, method: str, params: Any, *, timeout: float = 120.0) -> Any:
        """Send a request; its result as plain JSON."""
        proto = self.client.protocol
        fut = proto.send_request(method, self._typed(method, params))
        try:
            result = await asyncio.wait_for(asyncio.wrap_future(fut), timeout)
        except asyncio.TimeoutError:
            raise LspError(f"{method}: no answer within {timeout:.0f} s") from None
        except Exception as e:
            if self.returncode is not None:
                raise LspError(f"server closed the connection (exit code {self.returncode})") from e
            raise LspError(f"{method}: {e}") from e
        return plain(result, proto._converter)

    async def notify(self, method: str, params: Any) -> None:
        self.client.protocol.notify(method, self._typed(method, params))

    async def stop(self, timeout: float = 10.0) -> None:
        """shutdown + exit, then wait for the process (killed if it does not go)."""
        server = self.client._server
        if server is None:
            return
        try:
            if server.returncode is None:
                await self.request("shutdown", None, timeout=timeout)
                await self.notify("exit", None)
                await asyncio.wait_for(server.wait(), timeout)
        except (LspError, asyncio.TimeoutError, ConnectionError, BrokenPipeError):
            pass
        finally:
            if server.returncode is None:
                server.kill()
                await server.wait()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.client.stop(), timeout)
            if self._drain is not None:
                self._drain.cancel()

    async def __aenter__(self) -> LspClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()


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
