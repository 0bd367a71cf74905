"""Sodalite: a durable, self-hosted message broker that speaks the Azure Service Bus dialect of AMQP 1.0."""

__version__ = "0.1.0"
