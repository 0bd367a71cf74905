"""The official SDK's scenarios once more, against a broker whose queues run on the version-2 core.

The broker is started as users start it (``scripts/serve --core v2``): its plain queues run on the
pure partition core (``model/partition_core.py``) through the partition runner and store port v2,
with no message kept in memory beyond the window (``server/core_actor.py``). The scenarios are the
existing interop tests, imported unchanged, so their assertions are the same ones the version-1
path passes; each runs here with this module's ``broker`` fixture.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import test_aio_semantics
import test_conformance_messages
import test_hardening_locks
from broker_process import BrokerProcess, write_config
from test_aio_semantics import (  # noqa: F401
    test_aio_dead_letter_with_reason_and_receive_from_the_dead_letter_queue,
    test_aio_defer_receive_deferred_and_complete,
    test_aio_lock_expiry_and_renew_message_lock,
    test_aio_schedule_cancel_and_scheduled_delivery,
)
from test_conformance_messages import (  # noqa: F401
    test_a_message_id_that_was_sent_is_kept,
    test_a_message_sent_without_a_message_id_is_given_one,
    test_decimal_application_properties_come_back_readable,
    test_delivery_annotations_a_client_sends_are_delivered,
    test_each_message_of_a_batch_without_ids_gets_its_own,
    test_other_clients_get_the_decimal128_as_sent,
    test_peek_lock_delivery_carries_the_lock_token_in_delivery_annotations,
    test_receive_and_delete_keeps_client_delivery_annotations_without_a_lock_token,
)
from test_dedup_and_quota import (  # noqa: F401
    test_a_duplicate_message_id_is_accepted_and_dropped,
    test_a_full_entity_refuses_sends_with_a_quota_error,
    test_duplicate_history_and_session_state_survive_kill_9,
)
from test_durability import (  # noqa: F401
    test_group_committed_sends_survive_kill_9,
    test_thousand_messages_survive_kill_9,
)
from test_forwarding import (  # noqa: F401
    test_a_forwarding_loop_dead_letters_instead_of_spinning,
    test_dead_lettered_messages_are_forwarded_with_their_source,
    test_forward_to_moves_messages_with_their_properties,
)
from test_hardening_locks import (  # noqa: F401
    test_a_closed_receivers_lock_still_holds_on_the_same_connection,
    test_a_receive_and_delete_session_receiver_iterates_past_its_lock_duration,
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
from test_sdk_aio import (  # noqa: F401
    test_aio_send_batch_receive_settle,
    test_aio_unknown_queue,
)
from test_sdk_management import (  # noqa: F401
    test_peek_shows_messages_without_locking_or_removing_them,
    test_renew_lock_extends_it_past_the_lock_duration,
    test_unbuilt_management_operation_fails_clearly,
)

# The scenarios (imported names are collected here, with this module's fixtures).
from test_sdk_sync import (  # noqa: F401
    test_abandon_redelivers_with_delivery_count_one,
    test_batch_of_100_in_order_with_bodies_and_properties,
    test_body_kinds_round_trip,
    test_entity_names_match_case_insensitively,
    test_receive_and_delete,
    test_send_one_and_receive_it,
    test_unknown_queue_raises_entity_not_found,
)
from test_sessions import (  # noqa: F401
    test_a_locked_session_cannot_be_taken_by_a_second_receiver,
    test_a_named_session_gets_only_its_messages_in_order,
    test_aio_sessions,
    test_messages_without_a_session_id_are_refused,
    test_next_available_times_out_when_no_session_has_messages,
    test_session_lock_renewal_and_expiry,
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

V2 = ["--core", "v2"]


def _started(base: Path, queues: list[dict[str, Any]]) -> BrokerProcess:
    return BrokerProcess(base / "data", write_config(base / "Config.json", queues), extra_args=V2).start()


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = _started(tmp_path_factory.mktemp("core-v2"), QUEUES)
    yield process
    process.stop()


@pytest.fixture(scope="module")
def aio_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = _started(tmp_path_factory.mktemp("core-v2-aio"), test_aio_semantics.QUEUES)
    yield process
    process.stop()


@pytest.fixture(scope="module")
def wire_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = _started(tmp_path_factory.mktemp("core-v2-wire"),
                       [{"Name": q, "Properties": {}} for q in test_conformance_messages.QUEUES])
    yield process
    process.stop()


@pytest.fixture(scope="module")
def locks_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = _started(tmp_path_factory.mktemp("core-v2-locks"), test_hardening_locks.QUEUES)
    yield process
    process.stop()


@pytest.fixture
def fresh_broker(tmp_path: Path) -> Iterator[BrokerProcess]:
    """A broker of the test's own (not started), for tests that kill or restart it."""
    process = BrokerProcess(tmp_path / "data", write_config(tmp_path / "Config.json", QUEUES), extra_args=V2)
    yield process
    process.stop()
