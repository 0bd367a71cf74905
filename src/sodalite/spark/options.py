"""The data source's options, read and checked on the driver; every error names the option.

Spark hands options over as a case-insensitive map of strings with lower-cased keys.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from sodalite.amqpclient import connection_string
from sodalite.errors import ConfigurationError

EARLIEST: Final = -2
LATEST: Final = -1
DEAD_LETTER: Final = "/$deadletterqueue"


@dataclass(frozen=True, slots=True)
class SourceOptions:
    connection_string: str
    entity: str  # as the user named it
    dead_letter: bool
    starting_position: str  # "earliest", "latest", or JSON (checked: see starting_positions)
    max_messages_per_trigger: int | None
    consume: bool

    @property
    def path(self) -> str:
        """The address on the broker: the entity, or its dead-letter queue."""
        return self.entity + DEAD_LETTER if self.dead_letter else self.entity


@dataclass(frozen=True, slots=True)
class SinkOptions:
    connection_string: str
    entity: str | None  # the default target; a row's non-null 'entity' column overrides it
    source_entity: str  # names the source in derived MessageIds


def _required(options: Mapping[str, str], name: str) -> str:
    value = options.get(name.lower())
    if value is None or not str(value).strip():
        raise ConfigurationError(f"option '{name}' is required")
    return str(value).strip()


def _connection(options: Mapping[str, str]) -> str:
    text = _required(options, "connectionString")
    try:
        connection_string.parse(text)
    except ConfigurationError as exc:
        raise ConfigurationError(f"option 'connectionString': {exc}") from None
    return text


def _entity(value: str, option: str) -> str:
    if "/$" in value or value.startswith("/") or value.endswith("/"):
        raise ConfigurationError(f"option '{option}': '{value}' is not an entity name "
                                 "(a queue, or topic/subscriptions/name; use subQueue for the dead-letter queue)")
    return value


def starting_positions(text: str, partitions: int) -> dict[int, int]:
    """startingPosition as per-partition starts: EARLIEST, LATEST or a sequence number (inclusive).

    ``earliest`` and ``latest`` apply to every partition; JSON maps partition numbers (as strings) to a
    sequence number, -2 (earliest) or -1 (latest); partitions it leaves out start at the earliest.
    """
    word = text.strip().lower()
    if word == "earliest":
        return dict.fromkeys(range(partitions), EARLIEST)
    if word == "latest":
        return dict.fromkeys(range(partitions), LATEST)
    try:
        parsed = json.loads(text)
    except ValueError:
        parsed = None
    if not isinstance(parsed, dict):
        raise ConfigurationError(
            f"option 'startingPosition': '{text}' is not earliest, latest or a JSON object such as "
            '{"0": 1234, "1": -2} (partition -> sequence number, -2 earliest, -1 latest)')
    positions = dict.fromkeys(range(partitions), EARLIEST)
    for key, value in parsed.items():
        try:
            partition = int(key)
        except ValueError:
            partition = -1
        if not 0 <= partition < partitions:
            raise ConfigurationError(f"option 'startingPosition': partition '{key}' does not exist "
                                     f"(the entity has {partitions} partition(s), 0 to {partitions - 1})")
        if not isinstance(value, int) or isinstance(value, bool) or value < EARLIEST:
            raise ConfigurationError(f"option 'startingPosition': partition {key}: {value!r} is not a sequence "
                                     "number, -2 (earliest) or -1 (latest)")
        positions[partition] = value
    return positions


def source_options(options: Mapping[str, str]) -> SourceOptions:
    conn = _connection(options)
    entity = _entity(_required(options, "entity"), "entity")
    sub_queue = (options.get("subqueue") or "").strip().lower()
    if sub_queue not in ("", "deadletter"):
        raise ConfigurationError(f"option 'subQueue': '{sub_queue}' is not 'deadletter' (or empty for the entity)")
    starting = (options.get("startingposition") or "earliest").strip()
    starting_positions(starting, 1 << 16)  # the shape now; partition numbers again once the count is known
    limit_text = options.get("maxmessagespertrigger")
    limit: int | None = None
    if limit_text is not None:
        try:
            limit = int(str(limit_text).strip())
        except ValueError:
            limit = 0
        if limit <= 0:
            raise ConfigurationError(f"option 'maxMessagesPerTrigger': '{limit_text}' is not a positive integer")
    consume = (options.get("consume") or "none").strip().lower()
    if consume not in ("none", "complete"):
        raise ConfigurationError(f"option 'consume': '{consume}' is not 'none' or 'complete'")
    if consume == "complete" and sub_queue == "deadletter":
        raise ConfigurationError(
            "option 'consume': 'complete' is not supported with subQueue=deadletter: dead-lettered messages keep "
            "their original sequence numbers, so one can arrive below the reader's position and would be "
            "removed unread")
    return SourceOptions(conn, entity, sub_queue == "deadletter", starting, limit, consume == "complete")


def sink_options(options: Mapping[str, str]) -> SinkOptions:
    conn = _connection(options)
    entity_text = (options.get("entity") or "").strip()
    entity = _entity(entity_text, "entity") if entity_text else None
    source = (options.get("sourceentity") or "").strip() or "sodalite"
    return SinkOptions(conn, entity, source)
