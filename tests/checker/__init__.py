"""The fault-injecting checker (docs/reliability.md): a history of operations, promise checks over it, and a
runner that drives a real broker with the official Python SDK while faults hit it."""
