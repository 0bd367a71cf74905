"""A ``ServiceBusMessageBatch`` that keeps its messages, for senders that must resend or rewrite them.

The SDK's batch encodes each message as it is added and offers no public way to read them back. A
paired sender must rewrite a batch's messages for a backlog queue when it fails over, and a
replicated sender sends them to two namespaces; so their ``create_message_batch`` returns this
subclass. It is a real ``ServiceBusMessageBatch`` (the SDK's size checks, ``len``, ``size_in_bytes``
and ``max_size_in_bytes`` behave as usual) that also keeps the messages it accepted, in order.
"""

from __future__ import annotations

import uuid

from azure.servicebus import ServiceBusMessage, ServiceBusMessageBatch

MAX_MESSAGE_SIZE = 256 * 1024  # the Standard tier's limit, used when no link said otherwise

__all__ = ["MAX_MESSAGE_SIZE", "KeepingMessageBatch"]


class KeepingMessageBatch(ServiceBusMessageBatch):
    """A message batch whose messages stay readable (``batch.messages``).

    With ``set_message_ids``, a message without a MessageId gets a new UUID as it is added, so the
    copies sent to two namespaces share it (duplicate detection needs it)."""

    def __init__(self, max_size_in_bytes: int | None = None, *, set_message_ids: bool = False,
                 **kwargs: object) -> None:
        super().__init__(max_size_in_bytes=max_size_in_bytes or MAX_MESSAGE_SIZE, **kwargs)
        self._set_message_ids = set_message_ids
        self._kept: list[ServiceBusMessage] = []

    def add_message(self, message: object) -> None:
        """As the SDK's, for ``ServiceBusMessage`` objects (MessageSizeExceededError when it does not fit)."""
        if not isinstance(message, ServiceBusMessage):
            raise TypeError("this batch takes ServiceBusMessage objects (it must be able to resend them), "
                            f"not {type(message).__name__}")
        if self._set_message_ids and message.message_id is None:
            message.message_id = str(uuid.uuid4())
        super().add_message(message)
        self._kept.append(message)

    @property
    def messages(self) -> list[ServiceBusMessage]:
        """The messages added, in order (a copy of the list)."""
        return list(self._kept)
