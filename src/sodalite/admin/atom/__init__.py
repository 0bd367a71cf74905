"""The ATOM/XML documents of the Service Bus management REST API, as pure functions (no I/O, no clock).

``ServiceBusAdministrationClient`` PUTs an ATOM ``entry`` whose ``content`` holds a
``QueueDescription``, ``TopicDescription``, ``SubscriptionDescription`` or ``RuleDescription``
(sdk-wire-contract.md 8.2), and reads back entries and feeds in the shape the service writes (8.3).
Both directions exist for every kind, so that the broker (which parses PUT bodies and writes
entries) and a client (which writes PUT bodies and parses entries) share them:

- :mod:`~sodalite.admin.atom.vocabulary`: what a description holds (members, their order, runtime);
- :mod:`~sodalite.admin.atom.reading`: entries and descriptions in, to the model's JSON shape;
- :mod:`~sodalite.admin.atom.writing`: descriptions, entries and feeds out, from the model.
"""

from __future__ import annotations

from sodalite.admin.atom.reading import ParsedDescription, parse_description, parse_queue_description
from sodalite.admin.atom.vocabulary import (
    ATOM_NS,
    CONNECT_NS,
    READ_ONLY_QUEUE_MEMBERS,
    XSD_NS,
    Description,
    EntityRuntime,
)
from sodalite.admin.atom.writing import (
    empty_feed,
    entity_entry,
    error_body,
    feed,
    namespace_info_entry,
    queue_entry,
    request_entry,
)
from sodalite.admin.atom_authorization import XSI_NS

__all__ = [  # what the broker's ATOM service and the CLI's admin client use
    "ATOM_NS", "CONNECT_NS", "READ_ONLY_QUEUE_MEMBERS", "XSD_NS", "XSI_NS", "Description", "EntityRuntime",
    "ParsedDescription", "empty_feed", "entity_entry", "error_body", "feed", "namespace_info_entry",
    "parse_description", "parse_queue_description", "queue_entry", "request_entry",
]
