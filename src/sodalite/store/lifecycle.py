"""How a store adapter opens and closes, said once for all of them.

``open()`` makes the adapter's handle (a connection, a pool) once; opening again does nothing.
``close()`` is for good: opening after it raises. A call that needs the handle before ``open()`` or
after ``close()`` raises :class:`~sodalite.errors.StoreUnavailable` saying which.
"""

from __future__ import annotations

from sodalite.errors import StoreUnavailable


class OpenOnce:
    """The lifecycle's checks; an adapter sets ``_label`` (its kind and where it is, for messages)
    and ``_closed``, and keeps its own handle."""

    _label: str
    _closed: bool

    def _is_open(self, handle: object) -> bool:
        """At the top of ``open()``: whether ``handle`` is there already (nothing to do); raises
        once the store is closed."""
        if self._closed:
            raise self._unavailable()
        return handle is not None

    def _missing(self) -> StoreUnavailable:
        """What a call that needs the handle raises when there is none: closed, or not opened yet."""
        if self._closed:
            return self._unavailable()
        return StoreUnavailable(f"{self._label} is not open: call open() first")

    def _unavailable(self) -> StoreUnavailable:
        return StoreUnavailable(f"{self._label} is closed")
