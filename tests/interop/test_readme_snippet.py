"""The README's client snippet runs as a new user runs it: against a broker started with scripts/serve,
with the Python of the .venv that scripts/serve installs (issue 13, item 14)."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from azure.servicebus import ServiceBusClient, ServiceBusMessage
from broker_process import ROOT, BrokerProcess, write_config

pytestmark = pytest.mark.interop


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    base = tmp_path_factory.mktemp("readme")
    process = BrokerProcess(base / "data", write_config(base / "Config.json", [{"Name": "queue.1", "Properties": {}}]))
    yield process.start()
    process.stop()


def _first_python_block(readme: str) -> str:
    match = re.search(r"## Using it\n.*?```python\n(.*?)```", readme, re.S)
    assert match, "the README has no python snippet under 'Using it'"
    return match.group(1)


def test_the_readme_snippet_sends_and_receives_on_a_fresh_broker(broker: BrokerProcess) -> None:
    snippet = _first_python_block((ROOT / "README.md").read_text(encoding="utf-8"))
    assert "localhost:5672" in snippet
    # The snippet dials the default port; this broker listens on a free one.
    code = snippet.replace("localhost:5672", f"localhost:{broker.port}")
    python = ROOT / ".venv" / "bin" / "python"
    result = subprocess.run([str(python if python.exists() else Path(sys.executable)), "-c", code],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    # The snippet completed what it received: the queue is empty, and a message sent now is the only one.
    with ServiceBusClient.from_connection_string(broker.connection_string) as client:
        with client.get_queue_sender("queue.1") as sender:
            sender.send_messages(ServiceBusMessage("after"))
        with client.get_queue_receiver("queue.1") as receiver:
            got = receiver.receive_messages(max_message_count=10, max_wait_time=5)
            assert [str(m) for m in got] == ["after"]
            for m in got:
                receiver.complete_message(m)
