"""DuplicateFilter for asyncio receivers: the same class as ``sodalite.client.dedup``.

Its operations are in-memory lookups plus, with a file, one short fsynced SQLite write per
completed message, so the asyncio receivers call it directly; one filter may be shared by sync and
asyncio receivers of one process.
"""

from sodalite.client.dedup import DuplicateFilter

__all__ = ["DuplicateFilter"]
