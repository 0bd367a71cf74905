"""Service Bus messages and their AMQP sections, in one place: pure functions over bytes.

The rules every path that reads or writes a message keeps (the broker, the AMQP client, the Spark
data source, the control plane):

- A message is a sequence of AMQP sections. Only what a decision needs is decoded: the header, the
  message annotations and the properties. Application properties, body and footer are carried as
  the bytes the sender wrote, so they round-trip byte for byte.
- A received message keeps the sender's message annotations as encoded map entries, less the
  annotations only the service may set (:data:`names.SERVICE_OWNED_ANNOTATIONS`, "ignored on
  input"). The sender's delivery annotations are kept at the front of the stored tail.
- A message without a MessageId is given one when the broker receives it.
- A delivery is a fresh header (the delivery count raw: 0 on first delivery), the delivery
  annotations (the lock token first), the broker's annotations in front of the sender's, then the
  stored tail unchanged.
- A value the wire cannot carry back (an integer out of its field's AMQP range) is refused on
  receipt with ``ArgumentError``; an oversized message with ``MessageSizeExceeded``.
- Columns (the Spark schema and the broker's columnar pages) render values one way, here.

Modules by subject: :mod:`.names` (the annotation and property names), :mod:`.received` (a transfer
to drafts), :mod:`.delivery` (a stored message to a delivery), :mod:`.edits` (changing a stored
message's properties and annotations), :mod:`.sections` (one walk over a whole message, and building
one from parts), :mod:`.columns` (values as columns), :mod:`.outgoing` (a message a client writes),
:mod:`.plain` (a message as plain values, for people), :mod:`.requests` (``$cbs`` and
``$management`` request and reply messages), :mod:`.stored` (a stored message's parts read for
columns) and :mod:`.arrow` (the columns as Arrow arrays, pyarrow imported on first use).

This package imports only the AMQP layer and the errors; it does no I/O.
"""
