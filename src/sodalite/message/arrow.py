"""The columns as Arrow: each column kind's Arrow type, a schema, and one column's array.

Shared by the broker's columnar pages and the data source's row path, so both hand Spark the same
types: timestamps in microseconds (UTC), the application properties as ``map<string,string>``.
pyarrow is imported on first use (it is optional for the broker); it carries no type information,
so its objects are ``Any`` here and nowhere else in this package.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

from sodalite.message.columns import KINDS


def arrow_type(kind: str) -> Any:
    """The Arrow type of a column kind of the schema (``binary``, ``string``, ``long``, ``int``,
    ``timestamp``, ``map<string,string>``)."""
    import pyarrow as pa  # type: ignore[import-untyped]

    if kind == "timestamp":
        return pa.timestamp("us", tz="UTC")
    if kind == "map<string,string>":
        return pa.map_(pa.string(), pa.string())
    return {"binary": pa.binary(), "string": pa.string(), "long": pa.int64(), "int": pa.int32()}[kind]


@functools.cache
def schema(names: tuple[str, ...], strings: frozenset[str] = frozenset()) -> Any:
    """The columns ``names`` as a pyarrow schema; ``strings`` names extra columns (not of the schema)
    that hold a string."""
    import pyarrow as pa

    return pa.schema([pa.field(name, pa.string() if name in strings else arrow_type(KINDS[name])) for name in names])


def array(values: Sequence[object], kind: Any) -> Any:
    """One column's values as an Arrow array of type ``kind`` (a map column from its dicts)."""
    import pyarrow as pa

    if not pa.types.is_map(kind):
        return pa.array(values, type=kind)
    offsets = [0]
    keys: list[str] = []
    items: list[str | None] = []
    for m in values:
        assert isinstance(m, dict)
        keys.extend(m)
        items.extend(m.values())
        offsets.append(len(keys))
    return pa.MapArray.from_arrays(pa.array(offsets, type=pa.int32()), pa.array(keys, type=pa.string()),
                                   pa.array(items, type=pa.string()))
