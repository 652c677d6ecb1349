"""Feedback signals (shown / accepted / partially accepted / rejected / expired) in one sqlite3 store.

Used later to calibrate the gate. Rejection is inferred: a shown suggestion that the user types over,
that a newer suggestion replaces, or that outlives its time-to-live counts as rejected / expired.

Schema v2 adds ``suggestion_text``: for suggestions that were actually shown, the prompt the model saw
(the `FimPrompt` / `EditPrompt` the context builder built — exclusions and secrets already removed, so
nothing that was not already sent to the in-process model) and the model's output, so that
`edit-server align kto --feedback` can re-align the model on the user's own accepts and rejects. It
never leaves the machine; ``keep_text=False`` stores none, `purge_text` deletes it.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import time
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from edit_server.selectivity.dbwriter import DbWriter
from engine import options

log = logging.getLogger(__name__)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS events (
    ts REAL NOT NULL, suggestion TEXT NOT NULL, kind TEXT NOT NULL, event TEXT NOT NULL,
    score REAL, uri TEXT, extra TEXT
);
CREATE INDEX IF NOT EXISTS events_suggestion ON events(suggestion);
"""
SCHEMA_VERSION = 2
_MIGRATIONS = {  # version -> SQL that brings version - 1 to it
    2: """
CREATE TABLE IF NOT EXISTS suggestion_text (
    suggestion TEXT PRIMARY KEY, kind TEXT NOT NULL, prompt TEXT NOT NULL, completion TEXT NOT NULL,
    shown_text TEXT, ts REAL NOT NULL
);
""",
}
TERMINAL = {"accepted", "rejected", "expired"}


def default_db_path() -> Path:
    return options.env().data_home() / "edit-server" / "feedback.sqlite3"


@dataclass
class Outstanding:
    id: str
    kind: str  # "fim" | "edit"
    uri: str
    score: float
    created: float
    shown: bool = False
    text: tuple[str, str, str | None] | None = None  # (prompt JSON, completion, shown text)
    text_saved: bool = False


def prompt_json(prompt: Any) -> str:
    """A `FimPrompt` / `EditPrompt` (or an already plain dict) as JSON: its fields + ``type``
    (``engine.train.kto.records.prompt_from_dict`` reads it back)."""
    import dataclasses

    if isinstance(prompt, dict):
        d = dict(prompt)
    else:
        d = dataclasses.asdict(prompt)
        d["type"] = "edit" if "region" in d else "fim"
    return json.dumps(d, sort_keys=True)


def migrate(db: sqlite3.Connection) -> int:
    """Bring a store to `SCHEMA_VERSION` (v1 = the events table only); returns the version found."""
    db.executescript(_SCHEMA)
    found = max(1, int(db.execute("PRAGMA user_version").fetchone()[0]))
    for v in range(found + 1, SCHEMA_VERSION + 1):
        db.executescript(_MIGRATIONS[v])
    if found < SCHEMA_VERSION:
        db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        db.commit()
    return found


class FeedbackStore:
    def __init__(self, path: str | Path = "", ttl_s: float = 30.0, keep_text: bool = True) -> None:
        target = str(path) if path else str(default_db_path())
        if target != ":memory:":
            Path(target).parent.mkdir(parents=True, exist_ok=True)
        self.path = target
        self.ttl_s = ttl_s
        self.keep_text = keep_text
        def connect() -> sqlite3.Connection:
            db = sqlite3.connect(target, check_same_thread=False)
            migrate(db)
            return db

        self._writer = DbWriter(connect)  # the loop never waits on disk (dbwriter.py)
        self._pending: dict[str, Outstanding] = {}
        self.last_write: Future | None = None  # completes when the latest event is committed

    @property
    def _db(self) -> _ReadOnly:
        """Reads (after every queued write) for tests and the align CLI: ``store._db.execute(...)``."""
        return _ReadOnly(self._writer)

    def close(self) -> None:
        self._writer.close()

    def flush(self, timeout: float = 30.0) -> None:
        """Wait until every event logged so far is committed."""
        self._writer.read(lambda db: None, timeout)

    def _log(self, o: Outstanding, event: str, **extra: Any) -> Future:
        fut = self._writer.write("INSERT INTO events VALUES (?,?,?,?,?,?,?)",
                                 (time.time(), o.id, o.kind, event, o.score, o.uri,
                                  json.dumps(extra) if extra else None))
        self.last_write = fut
        if event in TERMINAL:
            self._pending.pop(o.id, None)
        return fut

    def _save_text(self, o: Outstanding) -> None:
        if o.text is None or o.text_saved or not self.keep_text:
            return
        prompt, completion, shown_text = o.text
        self._writer.write("INSERT OR REPLACE INTO suggestion_text VALUES (?,?,?,?,?,?)",
                           (o.id, o.kind, prompt, completion, shown_text, time.time()))
        o.text_saved = True

    def offered(self, sid: str, kind: str, uri: str, score: float, *, prompt: Any = None,
                completion: str | None = None, shown_text: str | None = None) -> None:
        """A suggestion was returned to the client (not yet known to be shown). ``prompt`` (the
        `FimPrompt` / `EditPrompt` the model saw) and ``completion`` (the model's raw output) are
        kept in memory and stored only once the suggestion is shown or accepted (KTO data)."""
        text = None
        if self.keep_text and prompt is not None and completion is not None:
            text = (prompt_json(prompt), completion, shown_text)
        self._pending[sid] = Outstanding(sid, kind, uri, score, time.monotonic(), text=text)

    def shown(self, sid: str) -> None:
        o = self._pending.get(sid)
        if o is not None and not o.shown:
            o.shown = True
            self._save_text(o)
            self._log(o, "shown")

    def accepted(self, sid: str, kind: str = "", uri: str = "", score: float = 0.0) -> Future:
        """Returns a Future done once the event is committed (answer the client after it)."""
        o = self._pending.get(sid) or Outstanding(sid, kind or "fim", uri, score, time.monotonic())
        self._save_text(o)
        return self._log(o, "accepted")

    def partial(self, sid: str, accepted_length: int) -> None:
        o = self._pending.get(sid)
        if o is not None:
            self._log(o, "partial", accepted_length=accepted_length)

    def typed_over(self, uri: str, keep: set[str] | None = None, reason: str = "typed over",
                   kind: str | None = None) -> None:
        """The document changed (or a newer suggestion replaced the shown one, ``reason="replaced"``):
        shown suggestions for it not in ``keep`` are rejected; unshown ones are forgotten. ``kind``: only
        suggestions of that kind (a new completion replaces the shown completion, not a shown next edit:
        editors show both at once)."""
        keep = keep or set()
        for o in list(self._pending.values()):
            if o.uri == uri and o.id not in keep and (kind is None or o.kind == kind):
                if o.shown:
                    self._log(o, "rejected", reason=reason)
                else:
                    self._pending.pop(o.id, None)

    def expire(self, now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        for o in list(self._pending.values()):
            if now - o.created > self.ttl_s:
                if o.shown:
                    self._log(o, "expired")
                else:
                    self._pending.pop(o.id, None)

    def counts(self) -> dict[str, int]:
        rows = self._db.execute("SELECT event, COUNT(*) FROM events GROUP BY event").fetchall()
        return {e: n for e, n in rows}

    def text_of(self, sid: str) -> tuple[str, str, str | None] | None:
        """(prompt JSON, completion, shown text) stored for a suggestion, or None."""
        row = self._db.execute("SELECT prompt, completion, shown_text FROM suggestion_text WHERE suggestion=?",
                               (sid,)).fetchone()
        return None if row is None else (row[0], row[1], row[2])

    def purge_text(self) -> int:
        """Delete every stored prompt / completion; returns how many there were."""
        def run(db: sqlite3.Connection) -> int:
            n = db.execute("DELETE FROM suggestion_text").rowcount
            db.commit()
            return int(n)

        return self._writer.read(run)

    def events(self, sid: str) -> list[str]:
        rows = self._db.execute("SELECT event FROM events WHERE suggestion=? ORDER BY rowid", (sid,)).fetchall()
        return [r[0] for r in rows]


class _ReadOnly:
    """``execute(sql, params)`` on the writer thread, results fetched there (a list of rows)."""

    def __init__(self, writer: DbWriter) -> None:
        self._writer = writer

    def execute(self, sql: str, params: tuple = ()) -> _Rows:
        return _Rows(self._writer.read(lambda db: db.execute(sql, params).fetchall()))


class _Rows(list):
    def fetchall(self) -> list:
        return list(self)

    def fetchone(self) -> Any:
        return self[0] if self else None
