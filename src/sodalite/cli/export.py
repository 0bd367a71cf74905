"""``sodalite namespace export``: a running broker's entities as a Config.json it (or the emulator) can load.

Everything is read through the management API, so the export shows what clients see, runtime
changes included. Properties go through the model, so the document is in its canonical form and
loads back unchanged. Namespace-level keys are not exported: the API does not reveal them, and a
configuration file is the wrong place to copy secrets to by accident.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from typing import Any

import defusedxml.ElementTree as _defused  # type: ignore[import-untyped, unused-ignore]

from sodalite.cli.admin_client import AdminClient
from sodalite.model.entities import QueueProperties, RuleDescription, SubscriptionProperties, TopicProperties


def namespace_name(client: AdminClient) -> str:
    root = _defused.fromstring(client.raw_get("$namespaceinfo"))
    for element in root.iter():
        if isinstance(element.tag, str) and element.tag.rsplit("}", 1)[-1] == "Name" and element.text:
            return str(element.text).strip()
    raise ET.ParseError("the namespace information has no Name")


def _subscription(client: AdminClient, topic: str, name: str, properties: dict[str, Any]) -> dict[str, Any]:
    rules = [RuleDescription.from_json(listed.parsed.properties, path="rule").to_json()
             for listed in client.list(f"{topic}/subscriptions/{name}/rules")]
    return {"Name": name, "Properties": SubscriptionProperties.from_json(properties).to_json(), "Rules": rules}


def export_namespace(client: AdminClient) -> dict[str, Any]:
    """The Config.json document of every queue, topic, subscription and rule the broker serves."""
    queues = [{"Name": listed.title, "Properties": QueueProperties.from_json(listed.parsed.properties).to_json()}
              for listed in client.list("$Resources/queues")]
    topics = []
    for listed in client.list("$Resources/topics"):
        subscriptions = [_subscription(client, listed.title, sub.title, sub.parsed.properties)
                         for sub in client.list(f"{listed.title}/subscriptions")]
        properties = TopicProperties.from_json(listed.parsed.properties).to_json()
        topics.append({"Name": listed.title, "Properties": properties, "Subscriptions": subscriptions})
    namespace = {"Name": namespace_name(client), "Queues": queues, "Topics": topics}
    return {"UserConfig": {"Namespaces": [namespace], "Logging": {"Type": "File"}}}
