"""The broker as the ATOM API's KeyAuthority (its shared access rules), and connection strings for its keys."""

from __future__ import annotations

from collections.abc import Sequence

from sodalite.model.authorization import AuthorizationRule
from sodalite.server.broker import Broker


class BrokerKeys:
    def __init__(self, broker: Broker, host: str) -> None:
        self.broker = broker
        self.host = host  # as connection strings show it (see cli.main.connection_string)

    def namespace_rules(self) -> Sequence[AuthorizationRule]:
        return self.broker.authorization_rules

    def entity_rules(self, path: str) -> Sequence[AuthorizationRule] | None:
        return self.broker.entity_rules(path)

    def connection_string(self, key_name: str, key: str, entity: str | None) -> str:
        entity_part = f"EntityPath={entity};" if entity is not None else ""
        return (f"Endpoint=sb://{self.host}:{self.broker.port};SharedAccessKeyName={key_name};SharedAccessKey={key};"
                f"{entity_part}UseDevelopmentEmulator=true;")
