"""Stable ports for brokers that the replication tests kill and restart on the same address."""

from __future__ import annotations

from broker_process import BrokerProcess, free_port_below_ephemeral_range


def with_stable_ports(broker: BrokerProcess) -> BrokerProcess:
    """Give every listener of ``broker`` a fixed free port, kept across restarts."""
    broker.port = free_port_below_ephemeral_range()
    broker.admin_port = free_port_below_ephemeral_range()
    broker.amqps_port = free_port_below_ephemeral_range()
    broker.http_port = free_port_below_ephemeral_range()
    return broker
