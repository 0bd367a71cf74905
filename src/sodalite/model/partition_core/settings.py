"""What the partition core is told about its entity: the settings it decides by, and who it talks to."""

from __future__ import annotations

import enum
from collections.abc import Hashable
from dataclasses import dataclass

Consumer = Hashable  # whoever receives: a receiver link's id, opaque to the core
ReplyTo = Hashable  # what a reply answers: a delivery tag, a management request id, ...
NO_REPLY: ReplyTo = ("sodalite.partition_core", "no reply")  # a settlement the core made itself
DROPPED: ReplyTo = ("sodalite.partition_core", "dropped")  # a lock an UpdateSettings ended (no reply either)


class ReceiveMode(enum.Enum):
    PEEK_LOCK = "peek_lock"
    RECEIVE_AND_DELETE = "receive_and_delete"


@dataclass(frozen=True, slots=True)
class CoreSettings:
    """The entity's settings as the core needs them (all times in ms)."""

    lock_duration: int = 60_000
    default_ttl: int | None = None
    max_delivery_count: int = 10
    dead_letter_on_expiration: bool = False
    duplicate_window: int | None = None  # None: no duplicate detection
    auto_delete_on_idle: int | None = None
    owner: str = "node"  # this node's id, written with every lock
    window_bytes: int = 1 << 20  # cap of the ready-message window
    read_count: int = 256  # rows asked for by one window read
    activate_limit: int = 256  # rows one Activate may turn ACTIVE
    scheduled_tracked: int = 4096  # activation times kept in memory; beyond, poll
    scheduled_poll: int = 1_000  # how often to try Activate for times not kept in memory
    requires_session: bool = False  # a session-enabled entity (see "Sessions" in the module docstring)
    shared_store: bool = False  # other nodes write the store: it decides duplicates (see "duplicate detection")
    forward_dead_letters: DeadLetterForward | None = None  # ForwardDeadLetteredMessagesTo (module docstring)
    # Whether an abandon raises the delivery count. Not in a dead-letter queue: Service Bus keeps a dead
    # letter's count as it was dead-lettered however often it is abandoned there (the Go SDK's live
    # TestMessageSettlementUsingReceiver); the abandon is then a release with its properties kept.
    abandon_counts: bool = True


@dataclass(frozen=True, slots=True)
class DeadLetterForward:
    """ForwardDeadLetteredMessagesTo as the caller resolved it: this entity's dead letters go to
    ``target`` (entity path, partition: a partition of the same store) instead of its dead-letter
    queue. ``source`` is this entity's name (the copy's ``x-opt-deadletter-source``), ``default_ttl``
    the target's DefaultMessageTimeToLive. With ``hop_limit`` (its description) the target's
    forwarding chain reached the hop limit and ``target`` is the transfer dead-letter queue where it
    stopped: the copy goes there with reason MaxTransferHopCountExceeded and never expires. With
    ``relayed`` the target is this entity's own dead-letter queue, where the copy waits for the
    server's relay into another store (``server/dead_letter_relay.py``): it does not expire there
    (the relay gives it its expiry in the target, counted from the forwarding)."""

    target: tuple[str, int]
    source: str
    default_ttl: int | None = None
    hop_limit: str | None = None
    relayed: bool = False
