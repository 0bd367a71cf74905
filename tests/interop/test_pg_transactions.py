"""AMQP transactions on the partition core over a PostgreSQL messaging store (one node).

Every scenario of ``test_transactions.py`` that runs against its module broker, imported unchanged,
served by this module's ``tx_broker``: the same configuration with ``scripts/serve`` and
``--store postgresql://...``, so each commit is one ``Transact`` batch of the PostgreSQL store (the
settlements fenced by token and every copy, in one database transaction). Several nodes:
``test_pg_two_nodes_transactions.py``.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import test_transactions
from broker_process import BrokerProcess, write_config
from test_transactions import QUEUES, TOPICS

from pg_server import PgServer, shared_server

# The scenarios, bound in test_transactions.py's own order: they share the module broker.
test_commit_makes_every_send_and_complete_visible_at_once = \
    test_transactions.test_commit_makes_every_send_and_complete_visible_at_once
test_rollback_leaves_no_send_and_the_message_locked_as_it_was = \
    test_transactions.test_rollback_leaves_no_send_and_the_message_locked_as_it_was
test_a_commit_whose_lock_was_lost_rolls_back_entirely = \
    test_transactions.test_a_commit_whose_lock_was_lost_rolls_back_entirely
test_unknown_transaction_ids_are_refused = test_transactions.test_unknown_transaction_ids_are_refused
test_connection_loss_rolls_back_its_transactions = test_transactions.test_connection_loss_rolls_back_its_transactions
test_partitioned_entities_follow_the_seed_rules = test_transactions.test_partitioned_entities_follow_the_seed_rules

pytestmark = pytest.mark.interop


def _server() -> PgServer:
    try:
        return shared_server()
    except RuntimeError as exc:
        pytest.skip(str(exc))


@pytest.fixture(scope="module")
def tx_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    server = _server()
    base = tmp_path_factory.mktemp("core-v2-pg-transactions")
    config = write_config(base / "Config.json", QUEUES, Topics=TOPICS)
    broker = BrokerProcess(base / "data", config,
                           extra_args=["--store", server.create_database("transactions"),
                                       "--log-level", "INFO"]).start()
    yield broker
    broker.stop()


def test_the_transaction_scenarios_ran_on_the_core_over_postgresql(tx_broker: BrokerProcess) -> None:
    output = "".join(tx_broker.output)
    for name in ("tx-a", "tx-b", "tx-topic", "tx-part"):
        assert f"serving {name} (" in output
    assert not (tx_broker.data_dir / "messages.db").exists()  # the messages are in the PostgreSQL database
