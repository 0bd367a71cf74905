"""DuplicateFilter, the copy bookkeeping, connection-string checks and the outbox file (no broker)."""

from __future__ import annotations

import datetime
import sqlite3
import uuid
from datetime import timedelta
from pathlib import Path

import pytest
from azure.servicebus import ServiceBusMessage

from sodalite.client import DuplicateFilter, Outbox, ReplicatedClient, ReplicationMode
from sodalite.client.outbox_core import decode, encode
from sodalite.client.replication_core import PING_CONTENT_TYPE, CopyTracker, Outcome, Verdict
from sodalite.errors import ConfigurationError, OutboxCorrupt

GOOD = "Endpoint=sb://a.example:5672;SharedAccessKeyName=k;SharedAccessKey=v;UseDevelopmentEmulator=true;"
OTHER = "Endpoint=sb://b.example:5672;SharedAccessKeyName=k;SharedAccessKey=v;UseDevelopmentEmulator=true;"


class FakeClock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def test_filter_remembers_within_the_window_and_forgets_after() -> None:
    clock = FakeClock()
    seen = DuplicateFilter(window=timedelta(minutes=10), clock=clock)
    seen.record("a")
    clock.now += 599
    assert "a" in seen and seen.seen("a")
    clock.now += 2
    assert "a" not in seen and len(seen) == 0


def test_filter_is_bounded_and_forgets_the_oldest_first() -> None:
    seen = DuplicateFilter(max_entries=3, clock=FakeClock())
    for message_id in "abcd":
        seen.record(message_id)
    assert [m in seen for m in "abcd"] == [False, True, True, True]
    assert len(seen) == 3


def test_filter_persisted_survives_a_reopen_without_expired_entries(tmp_path: Path) -> None:
    clock = FakeClock()
    path = tmp_path / "seen.sqlite"
    with DuplicateFilter(window=timedelta(seconds=100), path=path, clock=clock) as seen:
        seen.record("old")
        clock.now += 60
        seen.record("new")
    clock.now += 50  # "old" is now 110 s old, "new" 50 s
    with DuplicateFilter(window=timedelta(seconds=100), path=path, clock=clock) as seen:
        assert "new" in seen and "old" not in seen
    with sqlite3.connect(path) as db:  # the expired row is gone from the file too
        assert [r[0] for r in db.execute("SELECT message_id FROM recorded")] == ["new"]


def test_filter_rejects_a_file_that_is_not_sqlite(tmp_path: Path) -> None:
    path = tmp_path / "seen.sqlite"
    path.write_bytes(b"this is not a database at all, " * 100)
    with pytest.raises(ConfigurationError, match="not a usable SQLite database"):
        DuplicateFilter(path=path)


def test_filter_rejects_nonsense_bounds() -> None:
    with pytest.raises(ConfigurationError):
        DuplicateFilter(window=timedelta(0))
    with pytest.raises(ConfigurationError):
        DuplicateFilter(max_entries=0)


@pytest.mark.parametrize(("secondary", "complaint"), [
    (None, "secondary connection string is missing"),
    ("", "secondary connection string is missing"),
    ("   ", "secondary connection string is missing"),
    ("Endpoint=http://b.example;SharedAccessKeyName=k;SharedAccessKey=v", "needs Endpoint=sb://"),
    ("Endpoint=sb://b.example;SharedAccessKeyName=k", "needs SharedAccessKeyName"),
    ("garbage", "is not key=value"),
    (42, "must be a str"),
    (GOOD, "same namespace"),
])
def test_a_bad_secondary_connection_string_gets_a_clear_error(secondary: object, complaint: str) -> None:
    with pytest.raises(ConfigurationError, match=complaint):
        ReplicatedClient(GOOD, secondary, mode=ReplicationMode.ACTIVE)  # type: ignore[arg-type]


def test_a_bad_primary_is_named_as_the_primary() -> None:
    with pytest.raises(ConfigurationError, match="primary connection string is missing"):
        ReplicatedClient("", OTHER)


def test_a_mode_that_is_not_a_replication_mode_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="ReplicationMode"):
        ReplicatedClient(GOOD, OTHER, mode="active")  # type: ignore[arg-type]


def test_outbox_codec_keeps_every_property_and_typed_application_properties() -> None:
    when = datetime.datetime(2030, 1, 2, 3, 4, 5, tzinfo=datetime.UTC)
    message = ServiceBusMessage(b"\x00\x01body", message_id="m-1", session_id="s", content_type="application/x",
                                correlation_id="c", subject="subj", to="t", reply_to="r", reply_to_session_id="rs",
                                time_to_live=timedelta(seconds=90), scheduled_enqueue_time_utc=when,
                                application_properties={"i": 3, "f": 1.5, "b": True, "s": "x", "raw": b"\xff",
                                                        "u": uuid.UUID(int=7), "d": when, "none": None})
    copy = decode(encode(message))
    assert b"".join(copy.body) == b"\x00\x01body"
    for name in ("message_id", "session_id", "content_type", "correlation_id", "subject", "to", "reply_to",
                 "reply_to_session_id", "time_to_live", "scheduled_enqueue_time_utc"):
        assert getattr(copy, name) == getattr(message, name), name
    assert copy.application_properties == message.application_properties
    assert type(copy.application_properties["i"]) is int  # type: ignore[index]
    assert type(copy.application_properties["b"]) is bool  # type: ignore[index]


def test_outbox_refuses_a_corrupt_file_and_leaves_it_alone(tmp_path: Path) -> None:
    path = tmp_path / "outbox.sqlite"
    garbage = b"\x13\x37 not an outbox " * 512
    path.write_bytes(garbage)
    with pytest.raises(OutboxCorrupt, match=str(path)):
        Outbox(path)
    assert path.read_bytes() == garbage


def test_outbox_refuses_another_applications_database(tmp_path: Path) -> None:
    path = tmp_path / "other.sqlite"
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE t (x)")
    with pytest.raises(OutboxCorrupt, match="not a Sodalite outbox"):
        Outbox(path)


def test_outbox_refuses_a_damaged_page(tmp_path: Path) -> None:
    path = tmp_path / "outbox.sqlite"
    with Outbox(path) as outbox:
        outbox.send_messages("queue", "q", [ServiceBusMessage("x" * 3000) for _ in range(50)])
    data = bytearray(path.read_bytes())
    page = 4096
    data[2 * page: 3 * page] = b"\xa5" * page  # scribble over a b-tree page
    path.write_bytes(bytes(data))
    with pytest.raises(OutboxCorrupt, match="corrupt"):
        Outbox(path)


def test_outbox_accepts_without_a_client_and_keeps_order_across_reopen(tmp_path: Path) -> None:
    path = tmp_path / "outbox.sqlite"
    with Outbox(path) as outbox, outbox.get_queue_sender("q") as sender:
        sender.send_messages([ServiceBusMessage(f"{i}") for i in range(3)])
        assert len(outbox) == 3
        with pytest.raises(ConfigurationError, match="no client"):
            outbox.forward()
    with Outbox(path) as outbox:
        assert len(outbox) == 3


def test_outbox_refuses_a_message_it_cannot_store_before_acknowledging(tmp_path: Path) -> None:
    with Outbox(tmp_path / "outbox.sqlite") as outbox:
        with pytest.raises(TypeError, match="cannot store an application property"):
            outbox.send_messages("queue", "q", ServiceBusMessage("x", application_properties={"l": [1]}))
        assert len(outbox) == 0


# -- the copy bookkeeping (replication_core.CopyTracker), with stand-ins for received messages ----------

class Copy:
    """What the tracker reads of a received message: its MessageId and ContentType."""

    def __init__(self, message_id: str | None, content_type: str | None = None) -> None:
        self.message_id = message_id
        self.content_type = content_type


def _tracker(receive_and_delete: bool = False) -> CopyTracker[str]:
    return CopyTracker(DuplicateFilter(clock=FakeClock()), receive_and_delete)


def test_second_copy_in_flight_is_held_and_settled_like_the_first() -> None:
    tracker = _tracker()
    first, second = Copy("m"), Copy("m")
    assert tracker.admit(first, "primary") is Verdict.DELIVER  # type: ignore[arg-type]
    assert tracker.admit(second, "secondary") is Verdict.HOLD  # type: ignore[arg-type]
    assert "m" not in tracker.duplicates  # handed out is not completed
    assert tracker.settled(first, Outcome.COMPLETE) == [(second, "secondary")]  # type: ignore[arg-type]
    assert "m" in tracker.duplicates
    assert tracker.admit(Copy("m"), "primary") is Verdict.SETTLE_QUIETLY  # type: ignore[arg-type]


def test_an_abandoned_copy_records_nothing_and_its_redelivery_is_delivered() -> None:
    tracker = _tracker()
    first = Copy("m")
    tracker.admit(first, "primary")  # type: ignore[arg-type]
    assert tracker.settled(first, Outcome.ABANDON) == []  # type: ignore[arg-type]
    assert "m" not in tracker.duplicates
    assert tracker.admit(Copy("m"), "secondary") is Verdict.DELIVER  # type: ignore[arg-type]


def test_dead_lettering_or_deferring_records_nothing() -> None:
    for outcome in (Outcome.DEAD_LETTER, Outcome.DEFER):
        tracker = _tracker()
        first = Copy("m")
        tracker.admit(first, "primary")  # type: ignore[arg-type]
        tracker.settled(first, outcome)  # type: ignore[arg-type]
        assert "m" not in tracker.duplicates


def test_receive_and_delete_records_when_handed_out() -> None:
    tracker = _tracker(receive_and_delete=True)
    assert tracker.admit(Copy("m"), "primary") is Verdict.DELIVER  # type: ignore[arg-type]
    assert tracker.admit(Copy("m"), "secondary") is Verdict.DROP  # type: ignore[arg-type]


def test_pings_are_never_delivered_and_messages_without_id_always_are() -> None:
    tracker = _tracker()
    assert tracker.admit(Copy(None, PING_CONTENT_TYPE), "primary") is Verdict.SETTLE_QUIETLY  # type: ignore[arg-type]
    assert tracker.admit(Copy(None), "primary") is Verdict.DELIVER  # type: ignore[arg-type]
    assert tracker.admit(Copy(None), "secondary") is Verdict.DELIVER  # type: ignore[arg-type]


def test_copies_held_from_a_lost_receiver_are_forgotten() -> None:
    tracker = _tracker()
    first = Copy("m")
    tracker.admit(first, "primary")  # type: ignore[arg-type]
    tracker.admit(Copy("m"), "secondary")  # type: ignore[arg-type]
    tracker.forget_source("secondary")
    assert tracker.settled(first, Outcome.COMPLETE) == []  # type: ignore[arg-type]


def test_settling_a_message_this_receiver_did_not_hand_out_is_refused() -> None:
    with pytest.raises(ValueError, match="not received through this replicated receiver"):
        _tracker().source_of(Copy("x"))  # type: ignore[arg-type]


def test_what_is_not_built_says_so_before_anything_connects() -> None:
    from azure.servicebus import NEXT_AVAILABLE_SESSION, ServiceBusMessageBatch

    from sodalite.client.batch import KeepingMessageBatch
    from sodalite.client.replication import ReplicatedSessionReceiver
    from sodalite.client.replication_core import messages_of
    from sodalite.errors import NotImplementedOperation

    with ReplicatedClient(GOOD, OTHER) as client:
        assert isinstance(client.get_queue_receiver("q", session_id="s"), ReplicatedSessionReceiver)
        assert isinstance(client.get_subscription_receiver("t", "s", session_id=NEXT_AVAILABLE_SESSION),
                          ReplicatedSessionReceiver)
        receiver = client.get_queue_receiver("q")
        with pytest.raises(NotImplementedOperation, match="sequence number in each namespace"):
            receiver.receive_deferred_messages([1])
        with pytest.raises(NotImplementedOperation, match="sequence_number"):
            receiver.peek_messages(5, sequence_number=3)
    with pytest.raises(TypeError, match="create_message_batch"):
        messages_of(ServiceBusMessageBatch())  # made elsewhere: its messages cannot be read back
    batch = KeepingMessageBatch(set_message_ids=True)
    batch.add_message(ServiceBusMessage("a", message_id="kept"))
    batch.add_message(ServiceBusMessage("b"))
    first, second = messages_of(batch)
    assert first.message_id == "kept" and uuid.UUID(str(second.message_id))
    with pytest.raises(TypeError, match="ServiceBusMessage objects"):
        batch.add_message({"body": "a mapping"})
    with pytest.raises(TypeError, match="ServiceBusMessage objects"):
        messages_of(["not a message"])  # type: ignore[list-item]
    message = ServiceBusMessage("x")
    [same] = messages_of(message)
    assert same is message and uuid.UUID(str(message.message_id))  # a MessageId where there was none


def test_peek_memory_leaves_out_ids_seen_or_completed_and_pings() -> None:
    from sodalite.client.replication_core import PeekMemory

    duplicates = DuplicateFilter(clock=FakeClock())
    duplicates.record("done")
    memory = PeekMemory(duplicates, limit=2)
    first = memory.fresh([Copy("a"), Copy("done"), Copy(None), Copy("p", PING_CONTENT_TYPE)])  # type: ignore[list-item]
    assert [c.message_id for c in first] == ["a", None]
    assert [c.message_id for c in memory.fresh([Copy("a"), Copy("b")])] == ["b"]  # type: ignore[list-item]
    memory.fresh([Copy("c")])  # type: ignore[list-item]
    assert [c.message_id for c in memory.fresh([Copy("a")])] == ["a"]  # bounded: the oldest was forgotten
