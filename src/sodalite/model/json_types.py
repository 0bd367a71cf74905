"""JSON input as the model reads it (configuration, API bodies, stored rules): its types and its checks.

Rules: a value's type is named in JSON's words in every message; a check that fails raises
``ConfigurationError`` whose message starts with the path of the offending value
(``UserConfig.Namespaces[0].Queues[1].Properties.LockDuration: ...``); an unknown key is refused with
the closest allowed key suggested; a duplicate key (from a parser that records them) is refused.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from typing import Any, TypeAlias

from sodalite.errors import ConfigurationError

# A JSON document as json.loads gives it and json.dumps takes it.
JsonValue: TypeAlias = str | int | float | bool | list["JsonValue"] | dict[str, "JsonValue"] | None
JsonObject: TypeAlias = dict[str, JsonValue]


def json_type(value: object) -> str:
    """The JSON name of a Python value's type, for error messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list | tuple):
        return "array"
    if isinstance(value, Mapping):
        return "object"
    return type(value).__name__


def describe_value(value: object) -> str:
    """The JSON type of ``value``, with the value itself when it is a number or boolean."""
    if isinstance(value, bool):
        return f"boolean {str(value).lower()}"
    if isinstance(value, float):
        return f"number {value!r}"
    return json_type(value)


def join_path(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def config_error(path: str, reason: str) -> ConfigurationError:
    return ConfigurationError(f"{path}: {reason}")


# Typed loosely below: the values of a JSON object as parsed, not yet checked. The config reader (config.py)
# hands some straight to the constructors that check them, so they cannot be typed ``object``.
def expect_object(value: object, path: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise config_error(path or "(document)", f"must be a JSON object, got {json_type(value)}")
    duplicates = getattr(value, "duplicate_keys", ())
    if duplicates:
        raise config_error(join_path(path, duplicates[0]), "duplicate key")
    return value


def expect_array(value: object, path: str) -> list[object]:
    if not isinstance(value, list):
        raise config_error(path, f"must be a JSON array, got {json_type(value)}")
    return value


def expect_string(value: object, path: str) -> str:
    if not isinstance(value, str):
        raise config_error(path, f"must be a string, got {json_type(value)}")
    return value


def check_keys(obj: Mapping[str, object], allowed: tuple[str, ...], path: str) -> None:
    """Reject any key of ``obj`` not in ``allowed``, suggesting the closest allowed key."""
    for key in obj:
        if key in allowed:
            continue
        by_case = [name for name in allowed if name.lower() == str(key).lower()]
        close = by_case or difflib.get_close_matches(str(key), allowed, n=1, cutoff=0.75)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise config_error(join_path(path, str(key)), f"unknown property{hint}; allowed: {', '.join(allowed)}")


def require(obj: Mapping[str, Any], key: str, path: str) -> Any:  # (unchecked, as above)
    if key not in obj:
        raise config_error(join_path(path, key), "required property is missing")
    return obj[key]
