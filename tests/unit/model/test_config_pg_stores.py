"""MessagingStores entries that name a PostgreSQL database (``Url``) instead of a SQLite file."""

from __future__ import annotations

import json
from typing import Any

import pytest

from sodalite.errors import ConfigurationError
from sodalite.model.config import NamespaceConfig, load_config_text


def _namespace(stores: list[dict[str, Any]]) -> NamespaceConfig:
    text = json.dumps({"UserConfig": {"Namespaces": [{"Name": "ns1", "MessagingStores": stores}]}})
    (ns,) = load_config_text(text)
    return ns


def test_a_url_store_parses_beside_a_path_store() -> None:
    ns = _namespace([{"Name": "pg1", "Url": "postgresql://u:p@db1:5432/sodalite"},
                     {"Name": "disk", "Path": "d.db", "Offline": True}])
    pg, disk = ns.messaging_stores
    assert (pg.name, pg.url, pg.path, pg.offline) == ("pg1", "postgresql://u:p@db1:5432/sodalite", "", False)
    assert (disk.name, disk.url, disk.path, disk.offline) == ("disk", None, "d.db", True)


@pytest.mark.parametrize(("store", "problem"), [
    ({"Name": "a", "Url": "postgresql://h/db", "Path": "x.db"}, "not both"),
    ({"Name": "a", "Url": "mysql://u:secret@h/db"}, "must be a PostgreSQL URL"),
    ({"Name": "a", "Url": 5}, "must be a PostgreSQL URL"),
    ({"Name": "a"}, "Path"),
])
def test_bad_url_stores_are_refused_naming_the_field(store: dict[str, Any], problem: str) -> None:
    with pytest.raises(ConfigurationError) as caught:
        _namespace([store])
    message = caught.value.description
    assert message.startswith("UserConfig.Namespaces[0].MessagingStores[0]") and problem in message
    assert "secret" not in message
