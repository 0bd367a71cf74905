"""The emulator's Config.json as shipped, with // comments, starts a broker (issue 13, item 10)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from azure.servicebus import ServiceBusClient, ServiceBusMessage, ServiceBusReceiveMode
from broker_process import BrokerProcess

pytestmark = pytest.mark.interop

COMMENTED_CONFIG = """{
  // Sample configuration in the emulator's style: comments are allowed
  "UserConfig": {
    "Namespaces": [
      {
        "Name": "sbemulatorns",
        "Queues": [
          {
            "Name": "commented.queue", // a queue declared next to a comment
            "Properties": {
              "LockDuration": "PT1M", // one minute
              /* block comments too */
              "MaxDeliveryCount": 3
            }
          }
        ]
      }
    ],
    "Logging": { "Type": "File" } // the emulator writes its log to a file
  }
}
"""


@pytest.fixture(scope="module")
def commented_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    base = tmp_path_factory.mktemp("conformance-config")
    config = base / "Config.json"
    config.write_text(COMMENTED_CONFIG, encoding="utf-8")
    process = BrokerProcess(base / "data", config).start()
    yield process
    process.stop()


def test_a_config_with_comments_declares_its_queue(commented_broker: BrokerProcess) -> None:
    with ServiceBusClient.from_connection_string(commented_broker.connection_string) as client:
        with client.get_queue_sender("commented.queue") as sender:
            sender.send_messages(ServiceBusMessage("configured", message_id="c1"))
        with client.get_queue_receiver("commented.queue",
                                       receive_mode=ServiceBusReceiveMode.RECEIVE_AND_DELETE) as receiver:
            [message] = receiver.receive_messages(max_message_count=1, max_wait_time=10)
            assert str(message) == "configured"
