"""The official SDK's queue scenarios once more, on PARTITIONED queues run by the partition core.

The SDK scenarios of the plain-queue interop modules (send and receive, ReceiveAndDelete, settlement, locks,
sessions, TTL, scheduling, deferral, dead-lettering, sync and aio), imported unchanged, against
``scripts/serve`` brokers with three messaging stores on which each module's queues are created with
``EnablePartitioning``: 16 partitions each, one ``CoreActor`` per
partition behind ``PartitionedCoreActor``, a receiver's credit split over the partitions. Their
assertions are the ones a plain queue passes, so they check that a client cannot tell the
partitions are there (the seed: "the client-facing behavior of a partitioned queue ... is identical").

Left out, because each asserts an order across messages that a partitioned queue does not keep (the
seed: keyless messages go round-robin over the partitions, and a partition key, not the entity,
keeps order): ``test_sdk_sync.test_body_kinds_round_trip`` (five single sends, received in send
order) and ``test_dedup_and_quota.test_a_duplicate_message_id_is_accepted_and_dropped`` (under
duplicate detection each MessageId is its own partition key, so three ids land in three partitions;
it expects them in send order) and ``test_sdk_aio.test_aio_send_batch_receive_settle`` (a single
message, then a batch: two keyless sends, so two partitions; it expects the single one first). All
three pass on plain queues on the core (their own modules).

Left out, because they assert what a partitioned entity does differently, as Service Bus's does
and the version-1 path's partitioned queues do: ``test_durability.test_thousand_messages_survive_kill_9``
ends by checking that a message sent after a restart has a higher number than every earlier one,
but numbers are issued per partition (the seed: "relative to the partition") and the message may
land in a lower partition; ``test_dedup_and_quota.test_a_full_entity_refuses_sends_with_a_quota_error``
fills a 1 MB queue, but a partitioned entity's MaxSizeInMegabytes holds for each partition (16 times
it for the entity), as on version 1.

Left out to keep the suite's time: the two scenarios that wait out session-lock timers
(``test_a_receive_and_delete_session_receiver_iterates_past_its_lock_duration``,
``test_session_lock_renewal_and_expiry``, about 35 s between them). A session lives in one partition,
whose core is the plain queue's, and both run against plain queues on the core in
``test_hardening_locks`` and ``test_sessions``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import test_aio_semantics
import test_hardening_locks
from broker_process import BrokerProcess, write_config
from test_aio_semantics import (  # noqa: F401
    test_aio_dead_letter_with_reason_and_receive_from_the_dead_letter_queue,
    test_aio_defer_receive_deferred_and_complete,
    test_aio_lock_expiry_and_renew_message_lock,
    test_aio_schedule_cancel_and_scheduled_delivery,
)
from test_dedup_and_quota import (  # noqa: F401
    test_duplicate_history_and_session_state_survive_kill_9,
)
from test_durability import (  # noqa: F401
    test_group_committed_sends_survive_kill_9,
)
from test_hardening_locks import (  # noqa: F401
    test_a_closed_receivers_lock_still_holds_on_the_same_connection,
    test_closing_a_session_receiver_releases_the_session_and_its_messages,
    test_delivering_from_a_session_extends_its_lock,
    test_locks_outlive_the_receiving_connection_and_settle_by_token,
    test_session_expiry_takes_its_messages_locks,
    test_session_messages_ride_on_the_session_lock,
)
from test_locks import (  # noqa: F401
    test_closing_a_receiver_keeps_its_locks_until_they_expire,
    test_competing_receivers_never_share_a_locked_message,
    test_expired_lock_redelivers_and_settling_it_fails,
)
from test_sdk_management import (  # noqa: F401
    test_peek_shows_messages_without_locking_or_removing_them,
    test_renew_lock_extends_it_past_the_lock_duration,
)
from test_sdk_sync import (  # noqa: F401
    test_abandon_redelivers_with_delivery_count_one,
    test_batch_of_100_in_order_with_bodies_and_properties,
    test_receive_and_delete,
    test_send_one_and_receive_it,
)
from test_sessions import (  # noqa: F401
    test_a_locked_session_cannot_be_taken_by_a_second_receiver,
    test_a_named_session_gets_only_its_messages_in_order,
    test_messages_without_a_session_id_are_refused,
    test_next_available_times_out_when_no_session_has_messages,
    test_session_state_round_trips_and_sessions_are_listed,
)
from test_settlement import (  # noqa: F401
    test_dead_letter_with_reason_then_receive_it_from_the_dead_letter_queue,
    test_defer_then_receive_deferred_and_settle_by_sequence_number,
    test_expired_messages_are_dead_lettered_or_dropped_per_the_entity,
    test_max_delivery_count_moves_the_message_to_the_dead_letter_queue,
    test_scheduled_messages_appear_at_their_time_and_can_be_cancelled,
    test_the_entity_default_ttl_is_also_the_ceiling,
)

from conftest import QUEUES

pytestmark = pytest.mark.interop


def _partitioned(queues: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{**q, "Properties": {**q["Properties"], "EnablePartitioning": True}} for q in queues]


def _process(base: Path, queues: list[dict[str, Any]]) -> BrokerProcess:
    stores = [{"Name": "disk1", "Path": "stores/disk1.db"}, {"Name": "disk2", "Path": "stores/disk2.db"}]
    config = write_config(base / "Config.json", _partitioned(queues), MessagingStores=stores)
    return BrokerProcess(base / "data", config, extra_args=[])


def _started(base: Path, queues: list[dict[str, Any]]) -> BrokerProcess:
    return _process(base, queues).start()


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = _started(tmp_path_factory.mktemp("core-v2-partitioned-sdk"), QUEUES)
    yield process
    process.stop()


@pytest.fixture(scope="module")
def aio_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = _started(tmp_path_factory.mktemp("core-v2-partitioned-aio"), test_aio_semantics.QUEUES)
    yield process
    process.stop()


@pytest.fixture(scope="module")
def locks_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = _started(tmp_path_factory.mktemp("core-v2-partitioned-locks"), test_hardening_locks.QUEUES)
    yield process
    process.stop()


@pytest.fixture
def fresh_broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    """A broker of the test's own (not started), for tests that kill or restart it."""
    process = _process(tmp_path, QUEUES)
    yield process
    process.stop()
