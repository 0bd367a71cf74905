"""How ``sodalite serve`` logs: human text or JSON lines, both carrying a record's structured fields.

Code logs structured fields with ``extra={...}`` (the tracking id, AMQP condition, entity and
connection of an error sent to a client). JSON lines carry them as keys next to ``time``,
``level``, ``logger`` and ``message``, so a log shipper can index a tracking id; text appends them
as ``key=value`` so a person can grep for one.
"""

from __future__ import annotations

import datetime
import json
import logging
import sys
from typing import Any

FORMATS = ("text", "json")
# Attributes every LogRecord has; anything else on a record came from ``extra``.
_STANDARD = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime", "taskName"}


def fields(record: logging.LogRecord) -> dict[str, Any]:
    """The structured fields a record was logged with."""
    return {k: v for k, v in vars(record).items() if k not in _STANDARD and not k.startswith("_")}


def _plain(value: Any) -> Any:
    return value if value is None or isinstance(value, str | int | float | bool) else str(value)


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "time": datetime.datetime.fromtimestamp(record.created, datetime.UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in fields(record).items():
            entry.setdefault(key, _plain(value))
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False)


class TextFormatter(logging.Formatter):
    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s: %(message)s")

    def formatMessage(self, record: logging.LogRecord) -> str:
        extra = " ".join(f"{k}={v}" for k, v in fields(record).items() if v is not None)
        text = super().formatMessage(record)
        return f"{text} [{extra}]" if extra else text


ACCESS_LOGGER = "aiohttp.access"  # the management API's access log (aiohttp writes it at INFO)


def configure(level: str, log_format: str) -> None:
    """Send every log record to stderr in ``log_format``, at ``level`` and above."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if log_format == "json" else TextFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # One line per management request is noise at INFO; it is there when DEBUG is asked for.
    logging.getLogger(ACCESS_LOGGER).setLevel(logging.DEBUG if root.level <= logging.DEBUG else logging.WARNING)
