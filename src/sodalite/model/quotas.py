"""Service Bus quotas decided before anything is stored: an entity's size, the namespace's entity
counts, a topic's subscriptions. Each answers the refusal's text (QuotaExceeded), or None."""

from __future__ import annotations


def entity_full(name: str, size_in_bytes: int, adding: int, max_size_in_bytes: int | None) -> str | None:
    """A send of ``adding`` bytes to an entity holding ``size_in_bytes``: refused past MaxSizeInMegabytes."""
    if max_size_in_bytes is not None and size_in_bytes + adding > max_size_in_bytes:
        return f"the entity '{name}' is full: its MaxSizeInMegabytes is reached"
    return None


def namespace_full(entities: int, partitioned_entities: int, partitioned: bool, max_entity_count: int,
                   max_partitioned_entity_count: int) -> str | None:
    """Creating a queue or topic (``partitioned`` or not) next to ``entities`` queues and topics, of which
    ``partitioned_entities`` are partitioned (seed: 10,000 and 100)."""
    if entities >= max_entity_count:
        return f"the namespace already has {entities} queues and topics, its quota (MaxEntityCount {max_entity_count})"
    if partitioned and partitioned_entities >= max_partitioned_entity_count:
        return (f"the namespace already has {partitioned_entities} partitioned queues and topics, "
                f"its quota (MaxPartitionedEntityCount {max_partitioned_entity_count})")
    return None


def topic_full(topic: str, subscriptions: int, max_subscriptions: int) -> str | None:
    """Creating a subscription of a topic that has ``subscriptions`` already."""
    if subscriptions >= max_subscriptions:
        return f"the topic '{topic}' already has {subscriptions} subscriptions, its quota ({max_subscriptions})"
    return None
