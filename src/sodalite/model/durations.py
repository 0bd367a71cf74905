"""Durations as Service Bus spells them: ISO 8601 (``PT1M``), with .NET's ``TimeSpan.MaxValue`` as "never".

Rules: :func:`parse_duration` reads ``[-]PnDTnHnMn.nS`` (no years or months; at most 7 fractional
digits, as .NET's ticks) and raises ``ConfigurationError`` on anything else or on a value past
``TimeSpan.MaxValue``; :func:`format_duration` writes the shortest form that reads back the same;
:data:`TIMESPAN_MAX` is written as .NET writes ``TimeSpan.MaxValue``.
"""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Final

from sodalite.errors import ConfigurationError
from sodalite.model.json_types import json_type

#: .NET ``TimeSpan.MaxValue`` truncated to microseconds: Service Bus's "never" for durations.
TIMESPAN_MAX: Final = timedelta(days=10675199, hours=2, minutes=48, seconds=5, microseconds=477580)

_TIMESPAN_MAX_TICKS: Final = 9_223_372_036_854_775_807  # TimeSpan.MaxValue in 100 ns ticks
_TIMESPAN_MAX_TEXT: Final = "P10675199DT2H48M5.4775807S"  # how .NET and Service Bus spell it
_TICKS_PER_SECOND: Final = 10_000_000
_MAX_DIGITS: Final = 20

_DURATION_RE: Final = re.compile(
    r"P(?!\Z)"
    r"(?:(?P<days>[0-9]+)D)?"
    r"(?:T(?=[0-9])"
    r"(?:(?P<hours>[0-9]+)H)?"
    r"(?:(?P<minutes>[0-9]+)M)?"
    r"(?:(?P<seconds>[0-9]+)(?:\.(?P<fraction>[0-9]+))?S)?"
    r")?",
    re.ASCII,
)


def parse_duration(text: str) -> timedelta:
    """Parse an ISO 8601 duration of the form ``PnDTnHnMn.nS`` (each part optional, at least one).

    Fractions are allowed on seconds only and are truncated to microseconds; years, months, weeks,
    signs and values beyond ``TimeSpan.MaxValue`` are rejected with ``ConfigurationError``.
    """
    if not isinstance(text, str):
        raise ConfigurationError(f"expected an ISO 8601 duration string, got {json_type(text)}")
    match = _DURATION_RE.fullmatch(text)
    if match is None:
        raise ConfigurationError(
            f"invalid ISO 8601 duration {text!r} (expected a form such as PT1M, PT45S, P1DT2H or PT0.5S;"
            " years, months and weeks are not supported)"
        )
    parts = match.groupdict()
    if any(value is not None and len(value) > _MAX_DIGITS for value in parts.values()):
        raise ConfigurationError(f"duration {text!r} exceeds the maximum duration {_TIMESPAN_MAX_TEXT}")
    days = int(parts["days"] or 0)
    hours = int(parts["hours"] or 0)
    minutes = int(parts["minutes"] or 0)
    seconds = int(parts["seconds"] or 0)
    fraction = parts["fraction"] or ""
    ticks = ((days * 24 + hours) * 60 + minutes) * 60 + seconds
    ticks = ticks * _TICKS_PER_SECOND + int(fraction[:7].ljust(7, "0"))
    if ticks > _TIMESPAN_MAX_TICKS:
        raise ConfigurationError(f"duration {text!r} exceeds the maximum duration {_TIMESPAN_MAX_TEXT}")
    return timedelta(microseconds=ticks // 10)


def format_duration(value: timedelta) -> str:
    """Format a duration as ISO 8601 (``PT1M``, ``P1DT2H``, ``PT0.5S``); the inverse of
    :func:`parse_duration`. ``TIMESPAN_MAX`` is written as .NET writes ``TimeSpan.MaxValue``."""
    if value < timedelta(0) or value > TIMESPAN_MAX:
        raise ConfigurationError(f"duration {value!r} is outside 0 .. TimeSpan.MaxValue")
    if value == TIMESPAN_MAX:
        return _TIMESPAN_MAX_TEXT
    hours, rest = divmod(value.seconds, 3600)
    minutes, seconds = divmod(rest, 60)
    text = "P"
    if value.days:
        text += f"{value.days}D"
    time = ""
    if hours:
        time += f"{hours}H"
    if minutes:
        time += f"{minutes}M"
    if seconds or value.microseconds:
        time += f"{seconds}"
        if value.microseconds:
            time += "." + f"{value.microseconds:06d}".rstrip("0")
        time += "S"
    if time:
        text += "T" + time
    return text if text != "P" else "PT0S"
