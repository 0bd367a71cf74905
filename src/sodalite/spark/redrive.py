"""Redrive's call to the broker: move dead-lettered messages, chosen by sequence number, with the JSON API.

Spark chooses the messages (a batch read of the dead-letter queue, filtered with Spark SQL); the broker
moves them with its one move operation (``POST /api/v1/entities/{path}/$move``, the console's resubmit
and move): each message goes to the target with its MessageId and properties, delivery count reset,
dead-letter reason and description removed, and leaves the dead-letter queue in the same step, so a
message is moved once and never doubled (a repeated move of the same numbers finds nothing), and the
target's duplicate detection does not swallow it. Locked messages are skipped and counted.

Each Spark task sends its sequence numbers in chunks of :data:`CHUNK`, authorised by a SAS token made
from the connection string's key (Listen on the entity, Send on the target).
"""

from __future__ import annotations

import json
import ssl
import time
import urllib.error
import urllib.request
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import quote, urlsplit

from sodalite.amqpclient import connection_string
from sodalite.errors import ConfigurationError, SodaliteError
from sodalite.model import sas

CHUNK: Final = 500
TOKEN_LIFETIME_S: Final = 600


class MoveRefused(SodaliteError):
    """The broker's JSON API refused the move; the message carries its status, code and text."""


@dataclass(frozen=True, slots=True)
class MoveApi:
    """Where and as whom to call the move operation."""

    url: str  # http(s)://host:port of the broker's management API (the --http-port or admin port)
    key_name: str
    key: str
    ca_file: str | None = None

    @classmethod
    def of(cls, url: str, conn: str, ca_file: str | None = None) -> MoveApi:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ConfigurationError(f"'{url}' is not the http(s)://host:port of the broker's management API")
        settings = connection_string.parse(conn)
        return cls(f"{parts.scheme}://{parts.netloc}", settings.key_name, settings.key, ca_file)

    def move(self, entity: str, numbers: list[int], target: str | None) -> dict[str, int]:
        """Move ``numbers`` from ``entity``'s dead-letter queue to ``target`` (None: back to the entity)."""
        body: dict[str, Any] = {"subQueue": "deadletter", "sequenceNumbers": numbers}
        if target:
            body["target"] = target
        reply = self._call("POST", entity, "/$move", body)
        return {k: int(reply.get(k, 0)) for k in ("selected", "moved", "skipped")}

    def dead_letters(self, entity: str) -> int:
        """How many messages ``entity``'s dead-letter queue holds now (the command line's progress)."""
        return int(self._call("GET", entity, "", None)["counts"]["deadLetter"])

    def _call(self, method: str, entity: str, verb: str, body: dict[str, Any] | None) -> dict[str, Any]:
        token = sas.generate_token(self.url, self.key_name, self.key, int(time.time()) + TOKEN_LIFETIME_S)
        request = urllib.request.Request(
            f"{self.url}/api/v1/entities/{quote(entity.strip('/'), safe='/')}{verb}",
            data=None if body is None else json.dumps(body).encode(),
            headers={"Authorization": "Bearer " + token, "Content-Type": "application/json",
                     "Accept": "application/json"}, method=method)
        context = ssl.create_default_context(cafile=self.ca_file) if self.url.startswith("https") else None
        try:
            with urllib.request.urlopen(request, timeout=120, context=context) as response:
                reply = json.loads(response.read())
        except urllib.error.HTTPError as exc:
            raw = exc.read().decode("utf-8", "replace")
            try:
                error = json.loads(raw)["error"]
                raw = f"{error['code']}: {error['message']}"
            except (ValueError, KeyError, TypeError):
                pass
            what = "move from" if method == "POST" else "read"
            raise MoveRefused(f"the broker refused to {what} '{entity}' (HTTP {exc.code}): {raw}") from None
        except OSError as exc:
            raise MoveRefused(f"the broker's management API at {self.url} cannot be reached: {exc}") from None
        answer: dict[str, Any] = reply
        return answer


def move_rows(api: MoveApi, entity: str, target: str | None, rows: Iterable[Any]) -> Iterator[tuple[int, int, int]]:
    """A Spark task: move the sequence numbers of ``rows`` in chunks; yields (selected, moved, skipped)."""
    chunk: list[int] = []
    totals = [0, 0, 0]
    for row in rows:
        chunk.append(int(row[0]))
        if len(chunk) == CHUNK:
            _add(totals, api.move(entity, chunk, target))
            chunk = []
    if chunk:
        _add(totals, api.move(entity, chunk, target))
    yield totals[0], totals[1], totals[2]


def _add(totals: list[int], outcome: dict[str, int]) -> None:
    totals[0] += outcome["selected"]
    totals[1] += outcome["moved"]
    totals[2] += outcome["skipped"]
