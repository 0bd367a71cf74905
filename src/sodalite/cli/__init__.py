"""Command-line entry points: ``sodalite serve`` and, later, entity and pipeline commands."""
