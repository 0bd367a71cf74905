"""Resubmit, move, purge and the console's browsing, against a broker whose queues run on the version-2 core.

The broker is started as users start it (``scripts/serve --core v2``). Browsing (the console's and
the JSON API's listing of a queue or its dead-letter queue, and the selection of a move) reads the
store; purges and moves go through the source queue's core as one fenced ``MoveMessages`` each
chunk (``server/moves.py``, ``MoveOut`` in ``model/partition_core.py``). The scenarios are the
existing console, CLI and JSON API tests, imported unchanged, so their assertions are the ones the
version-1 path passes; each runs here with this module's fixtures (a ``--core v2`` broker):

- ``test_console_cli``: resubmit by filter, move of all, counts, purge, a bad filter, an unknown queue;
- ``test_console_browser``: the console story in headless Chromium (browse, open a message,
  resubmit from the dead-letter queue, purge), when Chromium and its driver are installed;
- ``test_console_resubmit_kill9``: 10,000 dead-lettered messages resubmitted through the JSON API,
  the broker killed midway, each message found exactly once afterwards. The test makes its own
  broker, so this module hands its module a ``BrokerProcess`` that serves with ``--core v2``.

Spark's redrive (the same JSON API move) runs against a ``--core v2`` broker in
``test_spark_core_v2_redrive.py``, a module of its own so it joins the Spark modules' one worker.
Not brought over: the console browser's topics-and-subscriptions test and its login-expiry test
(topics stay on the version-1 path under ``--core v2``; the login touches no queue), and the
syphon scenario (it restores into a topic).

What is not built yet on the core answers ``amqp:not-implemented`` (HTTP 501 in the JSON API), and
a test here pins that: a move from a queue on the core into a topic. (A transactional send to a
queue on the core, pinned here as not built until transactions came to the core, is stored at the
discharge: the last test; ``test_core_v2_transactions.py`` runs the transaction scenarios.)
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import test_console_cli
import test_console_resubmit_kill9
from azure.servicebus import ServiceBusClient, ServiceBusSubQueue
from broker_process import KEY, KEY_NAME, BrokerProcess, write_config
from raw_client import RawClient, message

# The scenarios (imported names are collected here, with this module's fixtures).
from test_console_cli import test_resubmit_move_purge_and_counts_from_the_command_line  # noqa: F401
from test_console_resubmit_kill9 import test_a_resubmit_killed_midway_loses_and_doubles_nothing  # noqa: F401

from sodalite.amqp.link import SENDER
from sodalite.amqp.performatives import Accepted, Declared, TransactionalState
from sodalite.model.sas import generate_token

try:  # the browser story needs selenium (its module skips itself without it)
    import test_console_browser
    from test_console_browser import browser  # noqa: F401
    from test_console_browser import test_the_console_story_from_login_to_delete as _browser_story
except pytest.skip.Exception:  # pragma: no cover - a machine without selenium
    test_console_browser = None  # type: ignore[assignment]

pytestmark = pytest.mark.interop

V2 = ["--core", "v2"]
PIN_QUEUE, PIN_TOPIC = "v2-pin", "v2-pin-topic"


class CoreV2BrokerProcess(BrokerProcess):
    """A broker that serves its queues on the version-2 core (for a module that makes its own)."""

    def __init__(self, data_dir: Path, config: Path | None, port: int = 0, extra_args: list[str] | None = None) -> None:
        super().__init__(data_dir, config, port, [*V2, *(extra_args or [])])


@pytest.fixture(autouse=True)
def _serve_on_the_core(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(test_console_resubmit_kill9, "BrokerProcess", CoreV2BrokerProcess)


@pytest.fixture(scope="module")
def cli_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    base = tmp_path_factory.mktemp("core-v2-console-cli")
    queues = [*test_console_cli.QUEUES, {"Name": PIN_QUEUE, "Properties": {}}]
    topics = [{"Name": PIN_TOPIC, "Properties": {}, "Subscriptions": [{"Name": "s", "Properties": {}}]}]
    process = BrokerProcess(base / "data", write_config(base / "Config.json", queues, Topics=topics),
                            extra_args=V2).start()
    yield process
    process.stop()


if test_console_browser is not None:
    test_the_console_story_from_login_to_delete = test_console_browser.pytestmark(_browser_story)

    @pytest.fixture(scope="module")
    def console_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
        base = tmp_path_factory.mktemp("core-v2-console-broker")
        process = BrokerProcess(base / "data", write_config(base / "Config.json", [{"Name": "existing",
                                                                                    "Properties": {}}]),
                                extra_args=V2).start()
        yield process
        process.stop()


# ---- what is not built on the core yet answers so ------------------------------------------------------


def test_a_move_from_a_queue_on_the_core_into_a_topic_is_not_implemented_and_moves_nothing(
        cli_broker: BrokerProcess) -> None:
    test_console_cli.dead_letter(cli_broker, PIN_QUEUE, [("p1", "green")])
    error = test_console_cli.messages(cli_broker, "move", PIN_QUEUE, "--to", PIN_TOPIC, "--all", expect=1)
    assert "HTTP 501" in error and f"into '{PIN_TOPIC}'" in error and "not available yet" in error
    with ServiceBusClient.from_connection_string(cli_broker.connection_string) as client:
        with client.get_queue_receiver(PIN_QUEUE, sub_queue=ServiceBusSubQueue.DEAD_LETTER) as dead:
            assert [m.message_id for m in dead.peek_messages(max_message_count=10)] == ["p1"]
        with client.get_subscription_receiver(PIN_TOPIC, "s") as subscription:
            assert subscription.peek_messages(max_message_count=10) == []


def test_a_transactional_send_to_a_queue_on_the_core_is_stored_at_the_discharge(cli_broker: BrokerProcess) -> None:
    raw = RawClient(cli_broker.port)
    try:
        audience = f"sb://localhost:{cli_broker.port}/"
        expiry = int(time.time()) + 300
        assert raw.put_token(audience, generate_token(audience, KEY_NAME, KEY, expiry), expiry * 1000) == 202
        controller = raw.coordinator()
        declared = raw.declare(controller)
        assert isinstance(declared, Declared) and declared.txn_id
        txn = bytes(declared.txn_id)
        sender = raw.attach(f"amqps://localhost:{cli_broker.port}/{PIN_QUEUE}", SENDER)
        outcome: Any = raw.send_in_transaction(sender, message(b"in a transaction"), txn)
        assert outcome == TransactionalState(txn, Accepted())
        with ServiceBusClient.from_connection_string(cli_broker.connection_string) as client, \
                client.get_queue_receiver(PIN_QUEUE) as receiver:
            assert receiver.peek_messages(max_message_count=10) == []  # nothing of it before the discharge
            assert raw.discharge(controller, txn) == Accepted()
            assert [str(m) for m in receiver.peek_messages(max_message_count=10)] == ["in a transaction"]
            [got] = receiver.receive_messages(max_message_count=1, max_wait_time=30)
            receiver.complete_message(got)
    finally:
        raw.close()
