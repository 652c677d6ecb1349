"""Logging for the commands: stderr or ``--log-file`` (stdout belongs to the stdio transport), every
record through the secret redaction."""

from __future__ import annotations

import argparse
import logging
import sys
import threading


class RedactingFilter(logging.Filter):
    """Every log record passes the prompts' secret redaction, with the rules of every file type and
    string escapes read through (``secrets.redact_any``): even a DEBUG log of whole messages (document
    text quoted in JSON) holds no secret. A record logged while a redaction is under way (a library logging
    from inside it) or one the redaction fails on is withheld, never passed through unredacted."""

    WITHHELD = "[log message withheld: secret redaction unavailable]"

    def __init__(self) -> None:
        super().__init__()
        from edit_server.context.secret_scan import all_rules

        all_rules()  # import the detectors now: a first import inside a log call would log and recurse
        self._busy = threading.local()

    def filter(self, record: logging.LogRecord) -> bool:
        from edit_server.context.secrets import redact_any as redact

        if getattr(self._busy, "on", False):
            record.msg, record.args, record.exc_info, record.exc_text = self.WITHHELD, None, None, None
            return True
        self._busy.on = True
        try:
            msg = record.getMessage()
            record.msg, record.args = redact(msg), None
            if record.exc_info and not record.exc_text:  # a traceback may quote text too
                record.exc_text = redact(logging.Formatter().formatException(record.exc_info))
        except Exception:  # noqa: BLE001 - fail closed: no unredacted text
            record.msg, record.args, record.exc_text = self.WITHHELD, None, None
        finally:
            self._busy.on = False
        return True


def setup_logging(args: argparse.Namespace) -> None:
    """Logs go to stderr or --log-file: stdout belongs to the stdio transport. INFO carries sizes and
    timings; message contents only at DEBUG — and secrets never (``RedactingFilter``)."""
    handler: logging.Handler = (logging.FileHandler(args.log_file) if args.log_file
                                else logging.StreamHandler(sys.stderr))
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    handler.addFilter(RedactingFilter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(args.log_level)
    if args.log_level != "DEBUG":  # pygls logs every message it sends (suggestions, text) at INFO
        for noisy in ("pygls", "aiohttp.access"):
            logging.getLogger(noisy).setLevel(logging.WARNING)
    for name in getattr(args, "log_debug", None) or []:
        logging.getLogger(name).setLevel(logging.DEBUG)
