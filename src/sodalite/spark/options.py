"""The data source's options, read and checked on the driver; every error names the option.

Spark hands options over as a case-insensitive map of strings with lower-cased keys.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Final

from sodalite.amqpclient import connection_string
from sodalite.errors import ConfigurationError

EARLIEST: Final = -2
LATEST: Final = -1
DEAD_LETTER: Final = "/$deadletterqueue"


@dataclass(frozen=True, slots=True)
class SourceOptions:
    connection_string: str
    entities: tuple[str, ...]  # as the user named them: one from 'entity', one or more from 'entities'
    dead_letter: bool
    starting_position: str  # "earliest", "latest", or JSON (checked: see starting_positions)
    max_messages_per_trigger: int | None
    consume: bool
    max_bytes_per_trigger: int | None = None
    several: bool = False  # given as 'entities': rows carry a sourceEntity column, offsets name each entity
    # 'entityPattern': a regular expression over queue and subscription names; ``entities`` are those it
    # matched when the source last listed them (see :func:`matching`)
    entity_pattern: str | None = None

    @property
    def entity(self) -> str:
        return self.entities[0]

    @property
    def path(self) -> str:
        """The address on the broker of the (first) entity: the entity, or its dead-letter queue."""
        return self.path_of(self.entities[0])

    @property
    def paths(self) -> tuple[str, ...]:
        return tuple(self.path_of(e) for e in self.entities)

    def path_of(self, entity: str) -> str:
        return entity + DEAD_LETTER if self.dead_letter else entity


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
    parsed = _json_object(text, 'such as {"0": 1234, "1": -2} (partition -> sequence number, -2 earliest, -1 latest)')
    if parsed is None:
        return dict.fromkeys(range(partitions), EARLIEST if text.strip().lower() == "earliest" else LATEST)
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


def _positive(options: Mapping[str, str], name: str) -> int | None:
    text = options.get(name.lower())
    if text is None:
        return None
    try:
        value = int(str(text).strip())
    except ValueError:
        value = 0
    if value <= 0:
        raise ConfigurationError(f"option '{name}': '{text}' is not a positive integer")
    return value


def _pattern(options: Mapping[str, str]) -> str | None:
    text = options.get("entitypattern")
    if text is None:
        return None
    if not text.strip():
        raise ConfigurationError("option 'entityPattern': give a regular expression over entity names")
    try:
        re.compile(text)
    except re.error as exc:
        raise ConfigurationError(f"option 'entityPattern': '{text}' is not a regular expression: {exc}") from None
    return str(text)


def matching(pattern: str, names: Iterable[str]) -> tuple[str, ...]:
    """The entity names ``pattern`` matches as a whole, ignoring case (entity names are case-insensitive),
    in order."""
    compiled = re.compile(pattern, re.IGNORECASE)
    return tuple(sorted((n for n in names if compiled.fullmatch(n)), key=str.lower))


def with_entities(options: SourceOptions, names: tuple[str, ...]) -> SourceOptions:
    """The options of a source given as 'entityPattern', reading ``names`` (what the pattern matches now)."""
    if not names:
        raise ConfigurationError(f"option 'entityPattern': '{options.entity_pattern}' matches no queue or "
                                 "subscription (it must match a whole name, e.g. 'orders-.*' or "
                                 "'events/subscriptions/.*')")
    return replace(options, entities=names)


def _entities(options: Mapping[str, str]) -> tuple[tuple[str, ...], bool]:
    one = (options.get("entity") or "").strip()
    several = (options.get("entities") or "").strip()
    given = [name for name, value in (("entity", one), ("entities", several),
                                      ("entityPattern", options.get("entitypattern"))) if value is not None and value]
    if len(given) > 1:
        raise ConfigurationError(f"options {' and '.join(repr(g) for g in given)} exclude each other: give one entity "
                                 "in 'entity', a comma-separated list in 'entities', or a regular expression in "
                                 "'entityPattern'")
    if "entityPattern" in given:
        return (), True
    if one:
        return (_entity(one, "entity"),), False
    if not several:
        raise ConfigurationError("option 'entity' (or 'entities', a comma-separated list, or 'entityPattern', a "
                                 "regular expression over entity names) is required")
    names = tuple(_entity(part.strip(), "entities") for part in several.split(","))
    if any(not name for name in names):
        raise ConfigurationError(f"option 'entities': '{several}' has an empty entity name")
    if len(set(names)) != len(names):
        raise ConfigurationError(f"option 'entities': '{several}' names an entity twice")
    return names, True


def _json_object(text: str, shape: str) -> dict[str, object] | None:
    """startingPosition read: None for the words earliest and latest, else its JSON object;
    ConfigurationError (naming the ``shape`` expected) for anything else."""
    if text.strip().lower() in ("earliest", "latest"):
        return None
    try:
        parsed = json.loads(text)
    except ValueError:
        parsed = None
    if not isinstance(parsed, dict):
        raise ConfigurationError(
            f"option 'startingPosition': '{text}' is not earliest, latest or a JSON object {shape}")
    return parsed


def _by_entity(text: str) -> dict[str, object] | None:
    """startingPosition with several entities: None for earliest or latest (all of them), else its JSON
    object of entity names."""
    return _json_object(text, 'of entity names, such as {"orders": "latest", "invoices": {"0": 1234}}')


def entity_starting_positions(text: str, entities: tuple[str, ...], strict: bool = True) -> dict[str, str]:
    """With several entities, startingPosition per entity (as text for :func:`starting_positions`):
    earliest or latest for all, or JSON mapping entity names to earliest, latest or per-partition objects;
    entities it leaves out start at the earliest. Not ``strict`` (a pattern's entities), names of other
    entities are ignored."""
    parsed = _by_entity(text)
    if parsed is None:
        return dict.fromkeys(entities, text.strip().lower())
    out = dict.fromkeys(entities, "earliest")
    for name, value in parsed.items():
        if name not in out and not strict:  # an entity a pattern does not match (now)
            continue
        if name not in out:
            raise ConfigurationError(f"option 'startingPosition': '{name}' is not one of the entities read "
                                     f"({', '.join(entities)})")
        out[name] = value if isinstance(value, str) else json.dumps(value)
        starting_positions(out[name], 1 << 16)
    return out


def source_options(options: Mapping[str, str]) -> SourceOptions:
    conn = _connection(options)
    entities, several = _entities(options)
    pattern = _pattern(options)
    sub_queue = (options.get("subqueue") or "").strip().lower()
    if sub_queue not in ("", "deadletter"):
        raise ConfigurationError(f"option 'subQueue': '{sub_queue}' is not 'deadletter' (or empty for the entity)")
    starting = (options.get("startingposition") or "earliest").strip()
    if several and pattern is None:
        entity_starting_positions(starting, entities)
    elif several:
        _pattern_starting_positions(starting)
    else:
        starting_positions(starting, 1 << 16)  # the shape now; partition numbers again once the count is known
    limit = _positive(options, "maxMessagesPerTrigger")
    max_bytes = _positive(options, "maxBytesPerTrigger")
    consume = (options.get("consume") or "none").strip().lower()
    if consume not in ("none", "complete"):
        raise ConfigurationError(f"option 'consume': '{consume}' is not 'none' or 'complete'")
    if consume == "complete" and sub_queue == "deadletter":
        raise ConfigurationError(
            "option 'consume': 'complete' is not supported with subQueue=deadletter: dead-lettered messages keep "
            "their original sequence numbers, so one can arrive below the reader's position and would be "
            "removed unread")
    return SourceOptions(conn, entities, sub_queue == "deadletter", starting, limit, consume == "complete",
                         max_bytes, several, pattern)


def _pattern_starting_positions(text: str) -> None:
    """startingPosition's shape for a pattern (the entities are known once listed): a word, or JSON by name."""
    for value in (_by_entity(text) or {}).values():
        starting_positions(value if isinstance(value, str) else json.dumps(value), 1 << 16)


def sink_options(options: Mapping[str, str]) -> SinkOptions:
    conn = _connection(options)
    entity_text = (options.get("entity") or "").strip()
    entity = _entity(entity_text, "entity") if entity_text else None
    source = (options.get("sourceentity") or "").strip() or "sodalite"
    return SinkOptions(conn, entity, source)
