"""AMQP 1.0, sans-IO: bytes <-> frames <-> performatives <-> connection events. No sockets here."""
