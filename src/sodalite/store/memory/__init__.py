"""The memory store (see :mod:`sodalite.store.memory.store`): for tests, development and fault
injection, and the reference the durable adapters are held to."""

from sodalite.store.memory.store import MemoryStore

__all__ = ["MemoryStore"]
