"""JMS message selectors (the ``jms-selector`` source filter), read as Service Bus SQL filters.

Apache Qpid JMS sends a consumer's or browser's selector in its source's filter set under the key
``jms-selector``, a described string (descriptor ``apache.org:selector-filter:string``, code
``0x0000468C00000004``). Service Bus evaluates JMS selectors with its SQL filter language; so does this
broker (``model/filters.py``): application properties by name, system properties as ``sys.<Name>``.
A browser applies it to what it peeks; a queue consumer's goes to the partition core with its credit
(``partition_core.Receive.selects``: it is given only the window messages it selects); a topic
consumer's subscription gets it as its rule. Partitioned and session-enabled queues refuse one.
"""

from __future__ import annotations

from typing import Any

from sodalite.amqp.performatives import Source
from sodalite.amqp.types import Described
from sodalite.model.entities import SqlFilter
from sodalite.model.filters import CompiledFilter, MessageView, compile_filter
from sodalite.model.message import MessageRecord
from sodalite.server.fanout import record_view

SELECTOR_KEY = "jms-selector"


def selector_of(source: Source | None) -> str | None:
    """The JMS selector a receiver's source carries, or None."""
    if source is None or not isinstance(source.filter, dict):
        return None
    for key, value in source.filter.items():
        if str(key) == SELECTOR_KEY:
            text: Any = value.value if isinstance(value, Described) else value
            return text if isinstance(text, str) and text.strip() else None
    return None


def sql_filter(selector: str) -> SqlFilter:
    """The selector as a Service Bus SQL filter; FilterSyntaxError (argument-error) if malformed."""
    return SqlFilter(selector)


class Selector:
    """A compiled selector, for messages as the store keeps them."""

    __slots__ = ("compiled", "text")

    def __init__(self, text: str) -> None:
        self.text = text
        self.compiled: CompiledFilter = compile_filter(sql_filter(text))

    def matches(self, record: MessageRecord) -> bool:
        view: MessageView = record_view(record)
        try:
            return bool(self.compiled.matches(view))
        except Exception:  # a selector that cannot be evaluated on a message does not select it
            return False
