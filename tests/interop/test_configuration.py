"""`sodalite serve --config`: keys from the file replace the default; a bad file is refused by name."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from azure.servicebus import ServiceBusClient, ServiceBusMessage
from azure.servicebus.exceptions import ServiceBusAuthenticationError
from broker_process import SERVE, BrokerProcess, write_config

pytestmark = pytest.mark.interop


def test_configured_key_replaces_the_default(tmp_path: Path) -> None:
    config = write_config(tmp_path / "Config.json", [{"Name": "q", "Properties": {}}],
                          AuthorizationRules=[{"KeyName": "app", "PrimaryKey": "primary-secret",
                                               "SecondaryKey": "secondary-secret"}])
    broker = BrokerProcess(tmp_path / "data", config).start()
    try:
        assert "SharedAccessKeyName=app;SharedAccessKey=primary-secret" in broker.connection_string
        for key in ("primary-secret", "secondary-secret"):
            with ServiceBusClient.from_connection_string(broker.connection_string_with(key, "app")) as client:
                with client.get_queue_sender("q") as sender:
                    sender.send_messages(ServiceBusMessage(key))
        default = broker.connection_string_with()  # RootManageSharedAccessKey / SAS_KEY_VALUE
        with ServiceBusClient.from_connection_string(default, retry_total=0) as client:
            with pytest.raises(ServiceBusAuthenticationError), client.get_queue_sender("q") as sender:
                sender.send_messages(ServiceBusMessage("refused"))
    finally:
        broker.stop()


def test_invalid_config_is_refused_naming_the_field(tmp_path: Path) -> None:
    config = write_config(tmp_path / "Config.json", [{"Name": "q", "Properties": {"LockDuration": "PT10M"}}])
    result = subprocess.run([str(SERVE), "--port", "0", "--data-dir", str(tmp_path / "d"), "--config", str(config)],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 2
    assert "UserConfig.Namespaces[0].Queues[0].Properties.LockDuration" in result.stderr


def test_configured_queues_survive_a_restart_without_the_file(tmp_path: Path) -> None:
    config = write_config(tmp_path / "Config.json", [{"Name": "kept", "Properties": {}}])
    broker = BrokerProcess(tmp_path / "data", config).start()
    broker.stop()
    restarted = BrokerProcess(tmp_path / "data", None).start()
    try:
        with ServiceBusClient.from_connection_string(restarted.connection_string) as client:
            with client.get_queue_sender("kept") as sender:
                sender.send_messages(ServiceBusMessage("still here"))
    finally:
        restarted.stop()
