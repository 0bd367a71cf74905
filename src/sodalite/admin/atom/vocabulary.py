"""What the management API's descriptions hold: namespaces, members, their order, the runtime figures.

Rules:

- four kinds of description: ``QueueDescription``, ``TopicDescription``, ``SubscriptionDescription``
  and ``RuleDescription`` (sdk-wire-contract.md 8.2);
- each entity kind has its settable members, by element name, with how their text is read
  (:data:`MEMBERS`); the members the service computes (``SizeInBytes``, ``CountDetails`` ...) are
  written in responses and skipped when a request echoes them;
- members are written in DataContract order (the ``*_LAYOUT`` tuples), settable and computed alike;
- :class:`EntityRuntime` is what the service computes about an entity (counts, size, timestamps).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Final, Literal

from sodalite.admin.counts import EntityCounts
from sodalite.model.entities import (
    QueueProperties,
    RuleDescription,
    SubscriptionProperties,
    TopicProperties,
)

ATOM_NS: Final = "http://www.w3.org/2005/Atom"

CONNECT_NS: Final = "http://schemas.microsoft.com/netservices/2010/10/servicebus/connect"

COUNTS_NS: Final = "http://schemas.microsoft.com/netservices/2011/06/servicebus"

XSD_NS: Final = "http://www.w3.org/2001/XMLSchema"

#: The api-version the service writes into ids and self links.
API_VERSION: Final = "2021-05"

#: What ``AccessedAt`` says for an entity nobody has used yet (.NET ``DateTime.MinValue``).
NEVER: Final = datetime(1, 1, 1, tzinfo=UTC)

#: The SQL compatibility level every filter and action of the service has.
SQL_COMPATIBILITY_LEVEL: Final = "20"

DescriptionKind = Literal["QueueDescription", "TopicDescription", "SubscriptionDescription", "RuleDescription"]

KINDS: Final[tuple[DescriptionKind, ...]] = (
    "QueueDescription", "TopicDescription", "SubscriptionDescription", "RuleDescription")

EntityProperties = QueueProperties | TopicProperties | SubscriptionProperties

Description = EntityProperties | RuleDescription

MemberKind = Literal["duration", "int", "bool", "status", "text", "entity", "authorization_rules"]

#: The settable QueueDescription members, by element name, and how their text is read.
QUEUE_MEMBERS: Final[dict[str, MemberKind]] = {
    "LockDuration": "duration",
    "MaxSizeInMegabytes": "int",
    "RequiresDuplicateDetection": "bool",
    "RequiresSession": "bool",
    "DefaultMessageTimeToLive": "duration",
    "DeadLetteringOnMessageExpiration": "bool",
    "DuplicateDetectionHistoryTimeWindow": "duration",
    "MaxDeliveryCount": "int",
    "EnableBatchedOperations": "bool",
    "Status": "status",
    "ForwardTo": "entity",
    "UserMetadata": "text",
    "SupportOrdering": "bool",
    "AutoDeleteOnIdle": "duration",
    "EnablePartitioning": "bool",
    "ForwardDeadLetteredMessagesTo": "entity",
    "EnableExpress": "bool",
    "MaxMessageSizeInKilobytes": "int",
    "AuthorizationRules": "authorization_rules",
}

TOPIC_MEMBERS: Final[dict[str, MemberKind]] = {
    "DefaultMessageTimeToLive": "duration",
    "MaxSizeInMegabytes": "int",
    "RequiresDuplicateDetection": "bool",
    "DuplicateDetectionHistoryTimeWindow": "duration",
    "EnableBatchedOperations": "bool",
    "Status": "status",
    "SupportOrdering": "bool",
    "AutoDeleteOnIdle": "duration",
    "EnablePartitioning": "bool",
    "EnableExpress": "bool",
    "UserMetadata": "text",
    "MaxMessageSizeInKilobytes": "int",
    "AuthorizationRules": "authorization_rules",
}

SUBSCRIPTION_MEMBERS: Final[dict[str, MemberKind]] = {
    "LockDuration": "duration",
    "RequiresSession": "bool",
    "DefaultMessageTimeToLive": "duration",
    "DeadLetteringOnMessageExpiration": "bool",
    "DeadLetteringOnFilterEvaluationExceptions": "bool",
    "MaxDeliveryCount": "int",
    "EnableBatchedOperations": "bool",
    "Status": "status",
    "ForwardTo": "entity",
    "UserMetadata": "text",
    "ForwardDeadLetteredMessagesTo": "entity",
    "AutoDeleteOnIdle": "duration",
}

MEMBERS: Final[dict[DescriptionKind, dict[str, MemberKind]]] = {
    "QueueDescription": QUEUE_MEMBERS,
    "TopicDescription": TOPIC_MEMBERS,
    "SubscriptionDescription": SUBSCRIPTION_MEMBERS,
}

#: Members the service computes; the SDK echoes them back on update and they are ignored.
READ_ONLY_QUEUE_MEMBERS: Final = frozenset(
    {
        "SizeInBytes",
        "MessageCount",
        "IsAnonymousAccessible",
        "CreatedAt",
        "UpdatedAt",
        "AccessedAt",
        "CountDetails",
        "EntityAvailabilityStatus",
    }
)

# The members of each description in DataContract order, settable and computed alike (the order
# the service writes them in; sdk-wire-contract.md 8.3 and the SDK's generated models).
QUEUE_LAYOUT: Final = (
    "LockDuration", "MaxSizeInMegabytes", "RequiresDuplicateDetection", "RequiresSession",
    "DefaultMessageTimeToLive", "DeadLetteringOnMessageExpiration", "DuplicateDetectionHistoryTimeWindow",
    "MaxDeliveryCount", "EnableBatchedOperations", "SizeInBytes", "MessageCount", "IsAnonymousAccessible",
    "AuthorizationRules", "Status", "ForwardTo", "UserMetadata", "CreatedAt", "UpdatedAt", "AccessedAt",
    "SupportOrdering", "CountDetails", "AutoDeleteOnIdle", "EnablePartitioning", "EntityAvailabilityStatus",
    "ForwardDeadLetteredMessagesTo", "EnableExpress", "MaxMessageSizeInKilobytes",
)

TOPIC_LAYOUT: Final = (
    "DefaultMessageTimeToLive", "MaxSizeInMegabytes", "RequiresDuplicateDetection",
    "DuplicateDetectionHistoryTimeWindow", "EnableBatchedOperations", "SizeInBytes",
    "FilteringMessagesBeforePublishing", "IsAnonymousAccessible", "AuthorizationRules", "Status", "CreatedAt",
    "UpdatedAt", "AccessedAt", "SupportOrdering", "CountDetails", "SubscriptionCount", "SqlFilterCount",
    "CorrelationFilterCount", "AutoDeleteOnIdle", "EnablePartitioning", "EntityAvailabilityStatus",
    "EnableSubscriptionPartitioning", "EnableExpress", "UserMetadata", "MaxMessageSizeInKilobytes",
)

SUBSCRIPTION_LAYOUT: Final = (
    "LockDuration", "RequiresSession", "DefaultMessageTimeToLive", "DeadLetteringOnMessageExpiration",
    "DeadLetteringOnFilterEvaluationExceptions", "DefaultRuleDescription", "MessageCount", "MaxDeliveryCount",
    "EnableBatchedOperations", "Status", "ForwardTo", "CreatedAt", "UpdatedAt", "AccessedAt", "CountDetails",
    "UserMetadata", "ForwardDeadLetteredMessagesTo", "AutoDeleteOnIdle", "EntityAvailabilityStatus",
)

@dataclass(frozen=True, slots=True, kw_only=True)
class EntityRuntime:
    """What the service computes about an entity: message counts, size, timestamps.

    Queues and subscriptions use the counts (the control plane's, its deferred count not shown);
    topics use ``size_in_bytes``, ``scheduled`` and the subscription and filter counts; a rule only
    its ``created_at``.
    """

    counts: EntityCounts = field(default_factory=EntityCounts)  # CountDetails and SizeInBytes
    created_at: datetime = NEVER
    updated_at: datetime = NEVER
    accessed_at: datetime | None = None
    subscription_count: int = 0
    sql_filter_count: int = 0
    correlation_filter_count: int = 0
    availability: str = "Available"  # EntityAvailabilityStatus: Limited while a store of it is unavailable

    @property
    def total(self) -> int:
        """``MessageCount``: every message the entity holds, dead-lettered and scheduled included."""
        counts = self.counts
        return counts.active + counts.dead_letter + counts.scheduled + counts.transfer + counts.transfer_dead_letter

COUNT_MEMBERS: Final = (
    ("ActiveMessageCount", "active"),
    ("DeadLetterMessageCount", "dead_letter"),
    ("ScheduledMessageCount", "scheduled"),
    ("TransferMessageCount", "transfer"),
    ("TransferDeadLetterMessageCount", "transfer_dead_letter"),
)

RUNTIME_INTS: Final = {
    "SubscriptionCount": "subscription_count",
    "SqlFilterCount": "sql_filter_count",
    "CorrelationFilterCount": "correlation_filter_count",
}

RUNTIME_TIMES: Final = {"CreatedAt": "created_at", "UpdatedAt": "updated_at", "AccessedAt": "accessed_at"}
