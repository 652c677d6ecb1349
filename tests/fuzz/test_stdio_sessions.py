"""Property-based sessions against the real server over stdio (hypothesis).

Random document edits (non-BMP characters = UTF-16 surrogate pairs, CRLF, combining marks, empty and
huge lines, full-document syncs), random inline-completion / next-edit requests, cancels and malformed
frames. After every session: no crash, no desync (the server's copy — ``editServer.documentState``, a
hash — equals the client's after every change), every request answered exactly once.

CI runs a bounded number of sessions (150, < 2 min); ``pytest -m e2e tests/fuzz --long --timeout 0`` runs
10,000 longer ones (about 20 min on a 2-core machine); ``--fuzz-sessions N`` sets the number.
"""

from __future__ import annotations

import hashlib
import itertools
import queue
import time
from collections import Counter, defaultdict
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from edit_server.lsp.convert import offset_to_position, utf16_len
from tests.e2e.raw_client import ENV, RawServer

pytestmark = pytest.mark.e2e

PIECES = ["a", "b", "x_1", " ", "    ", "\t", "\n", "\r\n", "é", "中文", "😀", "𝄞", "e\u0301", "(", ")", ":",
          "def f():", "return ", "'", '"', "\\"]
TEXT = st.one_of(st.lists(st.sampled_from(PIECES), max_size=30).map("".join),
                 st.just(""), st.just("y" * 50_000), st.just("\n" * 300))
BAD = [b"Content-Length: 99999999999999\r\n\r\n", b"Content-Length: zz\r\n\r\n", b"nonsense\r\n\r\n",
       b"Content-Length: 5\r\n\r\n{oops", b"Content-Length: 2\r\n\r\n[]", b"X: " + b"q" * 20_000 + b"\n\n"]
OP = st.one_of(
    st.tuples(st.just("edit"), st.floats(0, 1), st.floats(0, 1), TEXT),
    st.tuples(st.just("full"), TEXT),
    st.tuples(st.just("inline"), st.floats(0, 1), st.booleans()),
    st.tuples(st.just("next_edit"), st.floats(0, 1)),
    st.tuples(st.just("cancel"), st.floats(0, 1)),
    st.tuples(st.just("frame"), st.sampled_from(BAD)),
    st.tuples(st.just("check")),
)


TALLY: Counter[str] = Counter()  # what a run sent, by kind (printed at the end: run with -s to see it)


class Session:
    """The client side of one document: its text, version, and every request id it is owed."""

    ids = itertools.count()

    def __init__(self, server: RawServer, n: int, text: str) -> None:
        self.s, self.uri, self.text, self.version = server, f"file:///tmp/edit-server-fuzz/f{n}.py", text, 1
        self.owed: list[str] = []
        server.send({"jsonrpc": "2.0", "method": "textDocument/didOpen", "params": {"textDocument": {
            "uri": self.uri, "languageId": "python", "version": 1, "text": text}}})

    def _offset(self, f: float) -> int:
        off = int(f * len(self.text))
        if 0 < off < len(self.text) and self.text[off - 1] == "\r" and self.text[off] == "\n":
            off -= 1  # editors never address the middle of a CRLF
        return off

    def _pos(self, off: int) -> dict[str, int]:
        line, ch = offset_to_position(self.text, off)
        return {"line": line, "character": ch}

    def request(self, method: str, params: Any) -> str:
        rid = f"r{next(self.ids)}"
        self.s.send({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})
        self.owed.append(rid)
        return rid

    def op(self, op: tuple) -> None:
        kind = op[0]
        TALLY[kind] += 1
        if kind == "edit":
            a, b = sorted((self._offset(op[1]), self._offset(op[2])))
            rng = {"start": self._pos(a), "end": self._pos(b)}
            self.text = self.text[:a] + op[3] + self.text[b:]
            self.version += 1
            self.s.send({"jsonrpc": "2.0", "method": "textDocument/didChange", "params": {
                "textDocument": {"uri": self.uri, "version": self.version},
                "contentChanges": [{"range": rng, "text": op[3]}]}})
        elif kind == "full":
            self.text = op[1]
            self.version += 1
            self.s.send({"jsonrpc": "2.0", "method": "textDocument/didChange", "params": {
                "textDocument": {"uri": self.uri, "version": self.version}, "contentChanges": [{"text": op[1]}]}})
        elif kind in ("inline", "cancel"):
            rid = self.request("textDocument/inlineCompletion", {
                "textDocument": {"uri": self.uri}, "position": self._pos(self._offset(op[1])),
                "context": {"triggerKind": 1 if kind == "cancel" or op[2] else 2}})
            if kind == "cancel":
                self.s.send({"jsonrpc": "2.0", "method": "$/cancelRequest", "params": {"id": rid}})
        elif kind == "next_edit":
            self.request("textDocument/copilotInlineEdit", {
                "textDocument": {"uri": self.uri, "version": self.version},
                "position": self._pos(self._offset(op[1]))})
        elif kind == "frame":
            self.s.send(op[1])
        else:
            self.check()

    def check(self) -> None:
        rid = self.request("workspace/executeCommand", {"command": "editServer.documentState",
                                                         "arguments": [{"uri": self.uri}]})
        got = collect(self.s, [rid])[rid][0]["result"]
        want = hashlib.sha256(self.text.encode("utf-8", "surrogatepass")).hexdigest()
        assert got == {"version": self.version, "length": utf16_len(self.text), "sha256": want}, (
            "server and client disagree on the document", got, self.version)


_RESPONSES: dict[Any, list[dict[str, Any]]] = defaultdict(list)


def collect(s: RawServer, ids: list[str], timeout: float = 60.0) -> dict[Any, list[dict[str, Any]]]:
    """Drain the server's messages until every id in ``ids`` has a response."""
    deadline = time.monotonic() + timeout
    while any(not _RESPONSES[i] for i in ids):
        try:
            msg = s.messages.get(timeout=max(0.01, deadline - time.monotonic()))
        except queue.Empty:
            missing = [i for i in ids if not _RESPONSES[i]]
            raise AssertionError(f"no response to {missing}; server stderr: {s.stderr[-2000:]!r}") from None
        if "id" in msg and "method" not in msg:
            _RESPONSES[msg["id"]].append(msg)
    return _RESPONSES


@pytest.fixture(scope="module")
def server() -> Any:
    s = RawServer(env={**ENV, "EDIT_SERVER_ENGINE_FACTORY": "tests.e2e.fake_engines:instant"})
    s.initialize()
    yield s
    s.send({"jsonrpc": "2.0", "id": "bye", "method": "shutdown"})
    collect(s, ["bye"])
    s.send({"jsonrpc": "2.0", "method": "exit"})
    assert s.close() == 0, s.stderr[-2000:]


def test_random_sessions_keep_sync_and_answer_every_request_once(server: RawServer,
                                                                 request: pytest.FixtureRequest) -> None:
    long = request.config.getoption("--long")
    sessions = request.config.getoption("--fuzz-sessions") or (10_000 if long else 150)
    count = itertools.count()

    @settings(max_examples=sessions, deadline=None, derandomize=not long,
              suppress_health_check=list(HealthCheck))
    @given(TEXT, st.lists(OP, min_size=1, max_size=40 if long else 15))
    def session(text: str, ops: list[tuple]) -> None:
        sess = Session(server, next(count), text)
        for op in ops:
            sess.op(op)
            if op[0] in ("edit", "full"):
                sess.check()  # after every change
        sess.check()
        collect(server, sess.owed)
        time.sleep(0.05)  # a duplicate would arrive right behind the first answer
        while True:
            try:
                msg = server.messages.get_nowait()
            except queue.Empty:
                break
            if "id" in msg and "method" not in msg:
                _RESPONSES[msg["id"]].append(msg)
        assert all(len(_RESPONSES[i]) == 1 for i in sess.owed), [(i, _RESPONSES[i]) for i in sess.owed
                                                                  if len(_RESPONSES[i]) != 1]
        for i in sess.owed:  # each answer is a result or a clean error (cancelled / invalid)
            r = _RESPONSES[i][0]
            assert "result" in r or r["error"]["code"] in (-32800, -32602, -32600), r
        server.send({"jsonrpc": "2.0", "method": "textDocument/didClose", "params": {
            "textDocument": {"uri": sess.uri}}})

    session()
    assert server.proc.poll() is None  # alive after every session
    n = next(count)
    assert n >= sessions
    print(f"\nfuzz: {n} sessions; {TALLY['edit'] + TALLY['full']} changes ({TALLY['full']} full syncs), "
          f"{TALLY['inline'] + TALLY['next_edit'] + TALLY['cancel']} suggestion requests ({TALLY['cancel']} cancelled), "
          f"{TALLY['frame']} malformed frames, {TALLY['check'] + TALLY['edit'] + TALLY['full'] + n} sync checks")
