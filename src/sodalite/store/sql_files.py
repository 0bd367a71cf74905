"""SQL kept as files beside an adapter (package data): its schema, its numbered migrations and its
catalogue of named statements.

A catalogue is a ``.sql`` file of statements each headed by a ``-- name: <name>`` line (comment
lines after it describe the statement), parsed once at import: the adapter runs ``SQL["name"]``.
Schema and migration files are plain scripts of statements ended by ``;`` at the end of a line.
"""

from __future__ import annotations

import re
from importlib import resources
from types import MappingProxyType
from typing import Final

_NAME: Final = re.compile(r"^--\s*name:\s*([a-z0-9_]+)\s*$")


def read(package: str, name: str) -> str:
    """The text of file ``name`` (a path relative to ``package``'s directory)."""
    return resources.files(package).joinpath(name).read_text(encoding="utf-8")


def statements(text: str) -> list[str]:
    """The statements of a script, without its comment lines, each without its closing ``;`` (one
    inside a dollar-quoted body, ``$$ … $$``, does not close it)."""
    found: list[str] = []
    current: list[str] = []
    for line in text.splitlines():
        if (line.lstrip().startswith("--") or not line.strip()) and "\n".join(current).count("$$") % 2 == 0:
            continue
        current.append(line.rstrip())
        if line.rstrip().endswith(";") and "\n".join(current).count("$$") % 2 == 0:
            found.append("\n".join(current)[:-1].strip())
            current = []
    if current:
        raise ValueError(f"a statement is not closed by ';': {' '.join(current)[:80]!r}")
    return found


def catalogue(text: str) -> MappingProxyType[str, str]:
    """The named statements of a catalogue: name -> statement (one statement each, its ``;`` dropped)."""
    named: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in text.splitlines():
        match = _NAME.match(line.strip())
        if match:
            if match.group(1) in named:
                raise ValueError(f"statement {match.group(1)!r} is named twice")
            current = named[match.group(1)] = []
        elif current is not None and line.strip() and not line.lstrip().startswith("--"):
            current.append(line.rstrip())
    result: dict[str, str] = {}
    for name, lines in named.items():
        text_ = "\n".join(lines).strip()
        if not text_.endswith(";") or text_.count(";") != 1:
            raise ValueError(f"statement {name!r} must be one statement closed by ';'")
        result[name] = " ".join(part.strip() for part in text_[:-1].splitlines())
    return MappingProxyType(result)


def migrations(package: str, folder: str = "migrations") -> list[tuple[int, str, list[str]]]:
    """The numbered migrations of ``package``: (number, file name, statements), in order; a file is
    named ``NNNN_what.sql`` and its number is the schema version it brings a database to."""
    found = []
    for entry in resources.files(package).joinpath(folder).iterdir():
        if entry.name.endswith(".sql"):
            number = int(entry.name.split("_", 1)[0])
            found.append((number, entry.name, statements(entry.read_text(encoding="utf-8"))))
    found.sort()
    if [n for n, _, _ in found] != list(range(1, len(found) + 1)):
        raise ValueError(f"{package}: migrations must be numbered 1, 2, ... without gaps: {[n for n, _, _ in found]}")
    return found
