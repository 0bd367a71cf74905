"""The broker as the control plane's RuntimePort: :mod:`sodalite.server.control_plane`, which the
composition root (``sodalite serve``) wires with the broker, its keys and the backup service."""

from sodalite.server.control_plane import BrokerControl, shown_message

__all__ = ["BrokerControl", "shown_message"]
