"""Sodalite's own small AMQP client, on its AMQP layer: used by the command line and the Spark data source.

It sits beside the server (it imports the AMQP layer and the model, never the server), so both the
``cli`` layer and the ``spark`` package can use it.
"""

from sodalite.amqpclient.client import AmqpClient, ClientError, ManagementReply

__all__ = ["AmqpClient", "ClientError", "ManagementReply"]
