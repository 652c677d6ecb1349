"""Drive the real stdio server through edit cases like an editor: open, replay history, ask, judge."""

from __future__ import annotations

import asyncio
import logging
import re
import shutil
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from engine.textdiff import changed_span
from evals.cases import Case, Edit, diff_path, history_states, judge
from evals.humaneval import command_arg, command_score, completion_edit
from evals.lsp_client import TRIGGER_KINDS, LspClient, offset_of, server_command, utf16_position, warm_up
from evals.store import ResultStore
from evals.workspace import Snapshots

CLEAR_HISTORY = "editServer.clearHistory"
SETTLE = "editServer.settle"
# the same case gives the same prompt in every run: one history hunk per replayed edit whatever the timing,
# the builder's background work (indexing the document, git) done before each build
REPRODUCIBLE: dict[str, Any] = {"historyPauseMs": 0, "settleContext": True}
DIGEST_LOGGER = "edit_server.serving.contexts"  # logs "context <kind> digest <hash> (...)" at DEBUG
_DIGEST = re.compile(r"context (?:fim|edit) digest (\S+ \([^)]*\))")
log = logging.getLogger(__name__)


class BadCase(Exception):
    """The case itself cannot be run (its history does not apply, its files cannot be written)."""


def error_record(case_id: str, reason: str, case: Case | None = None, *, bad: bool = True) -> dict[str, Any]:
    """A finished case that failed: a bad case (``bad``: left out of the rates, counted as
    ``bad_cases``) or a failed run of a good one (a miss, counted in ``errors``)."""
    return {"id": case_id, "kind": case.kind if case else "unknown",
            "language": case.language if case else "unknown",
            "category": str(case.meta.get("category", case.kind if case.expected else "no-edit")) if case else "bad",
            "quiet_case": bool(case and case.expected is None), "shown": False, "accepted": False,
            "partial": 0.0, "correct": False, "score": None, "latency_ms": None, "error": reason[:500],
            "bad_case": bad, "suggestion": []}


ServingView = Callable[[Case, list[Edit]], dict[str, Any]]
_serving_view: ServingView | None = None


def set_serving_view(view: ServingView | None) -> None:
    """Plug in what the server's own rules make of a shown suggestion (``{"syntax_error": …, "candidate": …}``):
    `edit_server.cli.serving_view`, set by the ``edit-server eval`` command on top. evals/ only drives the
    server as a client; without a view (``python -m evals`` on a bare GPU image) records carry neither field."""
    global _serving_view
    _serving_view = view


def serving_view(case: Case, edits: list[Edit]) -> dict[str, Any]:
    return _serving_view(case, edits) if _serving_view is not None else {"syntax_error": None, "candidate": None}


def change_event(old: str, new: str) -> dict[str, Any]:
    """One incremental ``contentChanges`` entry turning ``old`` into ``new`` (smallest differing span)."""
    p, e_old, e_new = changed_span(old, new)
    return {"range": {"start": utf16_position(old, p), "end": utf16_position(old, e_old)}, "text": new[p:e_new]}


def _case_dir(case: Case) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", case.id)[:80] or "case"


class CaseRunner:
    """Runs cases on a server process; the server's edit history must not leak between cases.

    ``restart_every``: None (auto) = one server that gets ``workspace/executeCommand
    editServer.clearHistory`` before each case when it advertises that command, else a fresh server
    per case; N > 0 = restart every N cases; 0 = one server, history may carry over (fastest).

    Each case lives in its own directory ``<root>/<case id>/`` so documents of different cases never
    share a URI; its files are written to disk (the context builder may read them) and closed after; that
    directory is the server's one workspace folder while the case runs (the prompt's paths are the case's
    own, not ``<case id>/src/...``).
    With ``workspace`` (`evals.workspace.Snapshots`), a case from a git history runs inside its
    repository's snapshot instead, which becomes the server's one workspace folder
    (``workspace/didChangeWorkspaceFolders``); its files are written over the snapshot's and put back after.
    """

    def __init__(self, *, model: str, device: str, root: Path, log_path: Path, gate: bool,
                 threshold: float | None, timeout: float, restart_every: int | None = None,
                 init_extra: dict[str, Any] | None = None, workspace: Snapshots | None = None) -> None:
        self.model, self.device, self.root, self.log_path = model, device, root, log_path
        self.timeout, self.restart_every = timeout, restart_every
        self.workspace = workspace
        self._folder = root  # the server's workspace folder now
        extra = dict(init_extra or {})
        gate_opts: dict[str, Any] = {**extra.pop("gate", {}), "enabled": gate}  # e.g. gate.calibration
        if threshold is not None:
            gate_opts["threshold"] = threshold
        self.init = {"model": model, "device": device, "gate": gate_opts, "debounceMs": 0, **REPRODUCIBLE, **extra}
        self.client: LspClient | None = None
        self._served = 0

    async def _ensure(self) -> LspClient:
        dead = self.client is not None and self.client.proc is not None \
            and self.client.proc.returncode is not None
        every = self.restart_every
        if every is None:
            every = 0 if self._can_clear() else 1
        if self.client and (dead or every and self._served >= every):
            await self.client.stop()
            self.client = None
        if self.client is None:
            self.root.mkdir(parents=True, exist_ok=True)
            self.client = LspClient(server_command(self.model, self.device, ["--log-debug", DIGEST_LOGGER]),
                                    cwd=self.root, stderr_path=self.log_path)
            await self.client.start(self.root, self.init, timeout=self.timeout)
            self._folder = self.root
            await self.client.wait_ready(self.timeout)
            await warm_up(self.client, self.root, self.timeout)
            self._served = 0
        elif self._can_clear() and self.restart_every is None:
            await self.client.request("workspace/executeCommand",
                                      {"command": CLEAR_HISTORY, "arguments": []}, timeout=self.timeout)
        self._served += 1
        return self.client

    def _can_clear(self) -> bool:
        caps = self.client.capabilities if self.client else {}
        return CLEAR_HISTORY in (caps.get("executeCommandProvider") or {}).get("commands", [])

    async def close(self) -> None:
        if self.client:
            await self.client.stop()
            self.client = None

    async def _use_folder(self, client: LspClient, folder: Path) -> None:
        """Make ``folder`` the server's one workspace folder, indexed before the case's request."""
        if folder == self._folder:
            return
        await client.notify("workspace/didChangeWorkspaceFolders", {"event": {
            "added": [{"uri": folder.resolve().as_uri(), "name": folder.name}],
            "removed": [{"uri": self._folder.resolve().as_uri(), "name": self._folder.name}]}})
        self._folder = folder
        if SETTLE in (client.capabilities.get("executeCommandProvider") or {}).get("commands", []):
            # the folder is indexed before the case's clock starts (an editor indexes once, at start)
            await client.request("workspace/executeCommand", {"command": SETTLE, "arguments": []},
                                 timeout=self.timeout)

    async def run_case(self, case: Case) -> dict[str, Any]:
        """One case: a record; ``BadCase`` when the case cannot be run. A failure after the server
        saw the case is recorded as an error (a miss) and the server is restarted for the next one;
        a server that cannot start raises (``LspError``)."""
        snapshot = self.workspace.for_case(case) if self.workspace is not None else None
        base = snapshot or self.root / _case_dir(case)
        saved: dict[Path, bytes | None] = {}  # a snapshot's own files, put back after the case
        try:  # everything that can fail on the case's own data, before the server sees it
            states = history_states(case)
            uris: dict[str, str] = {}
            for path, text in case.files.items():
                f = base / path
                if snapshot is not None and f not in saved:
                    saved[f] = f.read_bytes() if f.is_file() else None
                f.parent.mkdir(parents=True, exist_ok=True)
                f.write_text(text, encoding="utf-8")
                uris[path] = f.resolve().as_uri()
        except (ValueError, OSError, KeyError) as e:
            _restore(saved)
            raise BadCase(f"{type(e).__name__}: {e}") from e
        cleanup = _once((lambda: _restore(saved)) if snapshot is not None else
                        (lambda: shutil.rmtree(base, ignore_errors=True)))
        try:
            client = await self._ensure()
            try:
                await self._use_folder(client, base)  # the prompt shows the case's own paths, as an editor's
                return await self._run(client, case, states, uris, cleanup)
            except Exception as e:  # noqa: BLE001 - the server broke on this case: record it, go on
                log.warning("case %s failed: %s", case.id, e)
                try:
                    await self.close()  # a fresh server for the next case (no half-open documents)
                except Exception:  # noqa: BLE001 - it is being replaced anyway
                    self.client = None
                return error_record(case.id, f"{type(e).__name__}: {e}", case, bad=False)
        finally:
            cleanup()  # no later case (nor a restarted server's scan) sees it

    async def _run(self, client: LspClient, case: Case, states: dict[str, list[str]],
                   uris: dict[str, str], cleanup: Callable[[], None]) -> dict[str, Any]:
        paths = {u: p for p, u in uris.items()}
        versions = dict.fromkeys(case.files, 1)
        current = {p: (states[p][0] if p in states else t) for p, t in case.files.items()}
        for path, text in current.items():
            await client.notify("textDocument/didOpen", {"textDocument": {
                "uri": uris[path], "languageId": case.language if path == case.path else "plaintext",
                "version": 1, "text": text}})
        for diff in case.history:  # the edits the user already made, oldest first
            path = diff_path(diff)
            if path not in states or len(states[path]) < 2:
                continue
            new = states[path][1]
            states[path] = states[path][1:]
            versions[path] += 1
            await client.notify("textDocument/didChange", {
                "textDocument": {"uri": uris[path], "version": versions[path]},
                "contentChanges": [change_event(current[path], new)]})
            current[path] = new
        cur = case.cursor
        text = case.files[cur.path]
        pos = utf16_position(text, cur.offset)
        log_at = self._log_size()
        t0 = time.perf_counter()
        err = None
        try:
            if case.kind == "fim":
                result = await client.request("textDocument/inlineCompletion", {
                    "textDocument": {"uri": uris[cur.path]}, "position": pos,
                    "context": {"triggerKind": TRIGGER_KINDS["invoked"]}}, timeout=self.timeout)
            else:
                result = await client.request("textDocument/copilotInlineEdit", {
                    "textDocument": {"uri": uris[cur.path], "version": versions[cur.path]},
                    "position": pos}, timeout=self.timeout)
        except Exception as e:  # noqa: BLE001 - recorded as no suggestion
            result, err = None, str(e)
        ms = (time.perf_counter() - t0) * 1000
        # gone (or the snapshot's own again) before the close: the server re-reads them for its index
        cleanup()
        for uri in uris.values():
            await client.notify("textDocument/didClose", {"textDocument": {"uri": uri}})
        edits, score = parse_suggestion(case, result, paths)
        digest = await self._digest(log_at)
        j = judge(case, edits)
        return {"id": case.id, "kind": case.kind, "language": case.language,
                "category": str(case.meta.get("category", case.kind if case.expected else "no-edit")),
                "repo": str(case.meta.get("repo", "")), "quiet_case": case.expected is None,
                "shown": j.shown, "accepted": j.accepted, "partial": j.partial, "line_f1": j.line_f1,
                "correct": j.correct, "score": score, "latency_ms": ms, "error": err,
                "origin": suggestion_origin(result) if case.kind != "fim" else None,
                **(serving_view(case, edits) if j.shown else {"syntax_error": None, "candidate": None}),
                "suggestion": [[e.path, e.start, e.end, e.text] for e in edits], "prompt_digest": digest}

    def _log_size(self) -> int:
        try:
            return self.log_path.stat().st_size
        except OSError:
            return 0

    async def _digest(self, since: int, wait_s: float = 1.0) -> str | None:
        """The digest of the prompt the server built for this case (its log from ``since`` on): the same
        digest in two runs = the same prompt. None: no build logged (the request was answered without)."""
        end = time.monotonic() + wait_s
        while True:
            try:
                with open(self.log_path, "rb") as f:
                    f.seek(since)
                    found = _DIGEST.findall(f.read().decode("utf-8", "replace"))
            except OSError:
                found = []
            if found or time.monotonic() > end:
                return found[-1] if found else None
            await asyncio.sleep(0.05)  # the client copies the server's stderr as it comes


def _once(fn: Callable[[], None]) -> Callable[[], None]:
    done = False

    def run() -> None:
        nonlocal done
        if not done:
            done = True
            fn()
    return run


def _restore(saved: dict[Path, bytes | None]) -> None:
    """Put a snapshot's files back as they were before a case wrote over them."""
    for f, data in saved.items():
        if data is None:
            f.unlink(missing_ok=True)
        else:
            f.write_bytes(data)


def suggestion_origin(result: Any) -> str | None:
    """Who wrote a next edit (the accept command's ``origin``: model, sampled, repeat), None when none."""
    items = result.get("edits", []) if isinstance(result, dict) else []
    return next((str(o) for o in (command_arg(i, "origin") for i in items) if o is not None), None)


def parse_suggestion(case: Case, result: Any, paths: dict[str, str]) -> tuple[list[Edit], float | None]:
    """Suggested edits (offsets in the case's files) and the gate score from the accept command."""
    cur = case.cursor
    if case.kind == "fim":
        e = completion_edit(case.files[cur.path], cur.offset, result)
        if e is None:
            return [], None
        return [Edit(cur.path, e[0], e[1], e[2])], e[3]
    edits: list[Edit] = []
    scores: list[float] = []
    for item in (result or {}).get("edits", []) if isinstance(result, dict) else []:
        uri = (item.get("textDocument") or {}).get("uri")
        path = paths.get(uri, cur.path) if uri else cur.path
        text = case.files.get(path, "")
        rng = item.get("range") or {}
        start = offset_of(text, rng.get("start", utf16_position(text, cur.offset)))
        end = offset_of(text, rng.get("end", rng.get("start", utf16_position(text, cur.offset))))
        edits.append(Edit(path, start, end, item.get("text", "")))
        s = command_score(item)
        if s is not None:
            scores.append(s)
    return edits, (max(scores) if scores else None)


async def _run_all(cases: list[Case], store: ResultStore, runner: CaseRunner,
                   progress: Callable[[Iterable], Iterable]) -> None:
    try:
        for case in progress([c for c in cases if not store.done(c.id)]):
            try:
                rec = await runner.run_case(case)
            except BadCase as e:  # reported with its reason; the run goes on
                log.warning("bad case %s: %s", case.id, e)
                rec = error_record(case.id, str(e), case)
            store.add(rec)
    finally:
        await runner.close()


def run_cases(cases: list[Case], store: ResultStore, runner: CaseRunner,
              progress: Callable[[Iterable], Iterable] = iter) -> None:
    asyncio.run(_run_all(cases, store, runner, progress))
