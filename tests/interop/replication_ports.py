"""Stable ports for brokers that the replication tests kill and restart on the same address."""

from __future__ import annotations

import random
import socket
from pathlib import Path

from broker_process import BrokerProcess


def free_port_below_ephemeral_range() -> int:
    """A free loopback port under the kernel's ephemeral range.

    A broker restarted on a port from the ephemeral range can find it taken (EADDRINUSE): while it
    was down, a client's outgoing connection may have been given that very port as its source.
    Ports below the range are never handed out that way."""
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    for _ in range(200):
        port = random.randrange(max(1024, low - 12000), low)
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port below the ephemeral range")


def with_stable_ports(broker: BrokerProcess) -> BrokerProcess:
    """Give every listener of ``broker`` a fixed free port, kept across restarts."""
    broker.port = free_port_below_ephemeral_range()
    broker.admin_port = free_port_below_ephemeral_range()
    broker.amqps_port = free_port_below_ephemeral_range()
    broker.http_port = free_port_below_ephemeral_range()
    return broker
