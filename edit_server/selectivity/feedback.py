"""Feedback signals (shown / accepted / partially accepted / rejected / expired) in one sqlite3 store.

Used later to calibrate the gate. Rejection is inferred: a shown suggestion that the user types over,
that a newer suggestion replaces, or that outlives its time-to-live counts as rejected / expired.
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS events (
    ts REAL NOT NULL, suggestion TEXT NOT NULL, kind TEXT NOT NULL, event TEXT NOT NULL,
    score REAL, uri TEXT, extra TEXT
);
CREATE INDEX IF NOT EXISTS events_suggestion ON events(suggestion);
"""
TERMINAL = {"accepted", "rejected", "expired"}


def default_db_path() -> Path:
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "edit-server" / "feedback.sqlite3"


@dataclass
class Outstanding:
    id: str
    kind: str  # "fim" | "edit"
    uri: str
    score: float
    created: float
    shown: bool = False


class FeedbackStore:
    def __init__(self, path: str | Path = "", ttl_s: float = 30.0) -> None:
        target = str(path) if path else str(default_db_path())
        if target != ":memory:":
            Path(target).parent.mkdir(parents=True, exist_ok=True)
        self.path = target
        self.ttl_s = ttl_s
        self._db = sqlite3.connect(target, check_same_thread=False)
        self._db.executescript(_SCHEMA)
        self._pending: dict[str, Outstanding] = {}

    def close(self) -> None:
        self._db.close()

    def _log(self, o: Outstanding, event: str, **extra: Any) -> None:
        self._db.execute("INSERT INTO events VALUES (?,?,?,?,?,?,?)",
                         (time.time(), o.id, o.kind, event, o.score, o.uri,
                          json.dumps(extra) if extra else None))
        self._db.commit()
        if event in TERMINAL:
            self._pending.pop(o.id, None)

    def offered(self, sid: str, kind: str, uri: str, score: float) -> None:
        """A suggestion was returned to the client (not yet known to be shown)."""
        self._pending[sid] = Outstanding(sid, kind, uri, score, time.monotonic())

    def shown(self, sid: str) -> None:
        o = self._pending.get(sid)
        if o is not None and not o.shown:
            o.shown = True
            self._log(o, "shown")

    def accepted(self, sid: str, kind: str = "", uri: str = "", score: float = 0.0) -> None:
        o = self._pending.get(sid) or Outstanding(sid, kind or "fim", uri, score, time.monotonic())
        self._log(o, "accepted")

    def partial(self, sid: str, accepted_length: int) -> None:
        o = self._pending.get(sid)
        if o is not None:
            self._log(o, "partial", accepted_length=accepted_length)

    def typed_over(self, uri: str, keep: set[str] | None = None, reason: str = "typed over") -> None:
        """The document changed (or a newer suggestion replaced the shown one, ``reason="replaced"``):
        shown suggestions for it not in ``keep`` are rejected; unshown ones are forgotten."""
        keep = keep or set()
        for o in list(self._pending.values()):
            if o.uri == uri and o.id not in keep:
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

    def events(self, sid: str) -> list[str]:
        rows = self._db.execute("SELECT event FROM events WHERE suggestion=? ORDER BY rowid", (sid,))
        return [r[0] for r in rows]
