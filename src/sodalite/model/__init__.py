"""Service Bus semantics, pure: no I/O and no clock reads (time always comes in as an argument)."""
