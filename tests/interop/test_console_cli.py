"""`sodalite messages ...`: the command line over the control plane's JSON API, against `scripts/serve`.

Each command runs in its own process as a user runs it; what it did is checked with the official SDK.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator

import pytest
from azure.servicebus import ServiceBusClient, ServiceBusMessage, ServiceBusSubQueue
from broker_process import BrokerProcess, write_config

QUEUES = [{"Name": "cli-orders", "Properties": {}}, {"Name": "cli-parking", "Properties": {}}]


@pytest.fixture(scope="module")
def cli_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    base = tmp_path_factory.mktemp("console-cli")
    process = BrokerProcess(base / "data", write_config(base / "Config.json", QUEUES)).start()
    yield process
    process.stop()


def messages(broker: BrokerProcess, *args: str, expect: int = 0) -> str:
    env = {**os.environ, "SODALITE_CONNECTION_STRING": broker.connection_string}
    result = subprocess.run([sys.executable, "-m", "sodalite.cli.main", "messages", *args, "--http",
                             "--admin-port", str(broker.http_port)], env=env, capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == expect, result.stderr
    return result.stdout if expect == 0 else result.stderr


def dead_letter(broker: BrokerProcess, queue: str, bodies: list[tuple[str, str]]) -> None:
    with ServiceBusClient.from_connection_string(broker.connection_string) as client:
        with client.get_queue_sender(queue) as sender:
            sender.send_messages([ServiceBusMessage(body, message_id=body, application_properties={"color": color})
                                  for body, color in bodies])
        with client.get_queue_receiver(queue, max_wait_time=10) as receiver:
            got = receiver.receive_messages(max_message_count=len(bodies), max_wait_time=10)
            assert len(got) == len(bodies)
            for message in got:
                receiver.dead_letter_message(message, reason="Bad")


def test_resubmit_move_purge_and_counts_from_the_command_line(cli_broker: BrokerProcess) -> None:
    dead_letter(cli_broker, "cli-orders", [("a", "red"), ("b", "blue"), ("c", "red")])
    assert messages(cli_broker, "resubmit", "cli-orders", "--sql", "color = 'red'") == "moved 2 of 2\n"
    assert messages(cli_broker, "move", "cli-orders", "--to", "cli-parking", "--all") == "moved 1 of 1\n"
    counts = {e["path"]: e["counts"] for e in json.loads(messages(cli_broker, "counts", "--json"))}
    assert counts["cli-orders"]["active"] == 2 and counts["cli-orders"]["deadLetter"] == 0
    assert counts["cli-parking"]["active"] == 1
    with ServiceBusClient.from_connection_string(cli_broker.connection_string) as client:
        with client.get_queue_receiver("cli-parking", max_wait_time=10) as receiver:
            (moved,) = receiver.receive_messages(max_message_count=1, max_wait_time=10)
            assert moved.message_id == "b" and moved.dead_letter_reason is None and moved.delivery_count == 0
            receiver.complete_message(moved)
        with client.get_queue_receiver("cli-orders", sub_queue=ServiceBusSubQueue.DEAD_LETTER,
                                       max_wait_time=2) as dead:
            assert dead.peek_messages(max_message_count=10) == []
    assert messages(cli_broker, "purge", "cli-orders") == "purged 2\n"
    error = messages(cli_broker, "resubmit", "cli-orders", "--filter", "color = = 1", expect=1)
    assert "HTTP 400" in error
    error = messages(cli_broker, "purge", "no-such-queue", expect=1)
    assert "HTTP 404 MessagingEntityNotFound" in error


def test_counts_are_an_aligned_table(cli_broker: BrokerProcess) -> None:
    dead_letter(cli_broker, "cli-parking", [("long-enough", "green")])
    lines = messages(cli_broker, "counts").splitlines()
    header, rows = lines[0], lines[1:]
    assert header.split() == ["ENTITY", "KIND", "ACTIVE", "DEAD-LETTER", "SCHEDULED", "DEFERRED", "AVAILABILITY"]
    assert {row.split()[0] for row in rows} >= {"cli-orders", "cli-parking"}
    # Every row has its columns where the header has them: numbers end under their heading's end.
    for heading in ("ACTIVE", "DEAD-LETTER", "SCHEDULED", "DEFERRED"):
        end = header.index(heading) + len(heading)
        assert all(row[end - 1].isdigit() and (len(row) == end or row[end] == " ") for row in rows), lines
    start = header.index("AVAILABILITY")
    assert all(row[start - 1] == " " and row[start] != " " for row in rows), lines


def test_the_earlier_filter_flag_still_works_and_is_not_advertised(cli_broker: BrokerProcess) -> None:
    dead_letter(cli_broker, "cli-orders", [("old-flag", "violet")])
    assert messages(cli_broker, "resubmit", "cli-orders", "--filter", "color = 'violet'") == "moved 1 of 1\n"
    shown = subprocess.run([sys.executable, "-m", "sodalite.cli.main", "messages", "resubmit", "--help"],
                           capture_output=True, text=True, timeout=60).stdout
    assert "--sql" in shown and "--filter" not in shown
