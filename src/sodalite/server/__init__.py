"""The only asyncio and socket code: listener, connections, $cbs, $management, partition actors."""
