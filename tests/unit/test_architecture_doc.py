"""docs/architecture.md names modules and functions; each must exist, so the page cannot silently rot.

Every backticked ``path.py`` (or ``package/``) resolves under ``src/sodalite/`` (a bare ``name.py`` in
any package). Every backticked code name is defined in the sources: ``A.b`` as ``b`` in the module
that defines ``A`` (or in module ``A.py``), a plain name somewhere in ``src/sodalite``. Backticked
words that are not code (Service Bus property names, outcomes, addresses) are listed in ``NOT_CODE``.
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src" / "sodalite"
DOC = ROOT / "docs" / "architecture.md"

NOT_CODE = {
    "orders", "accepted", "rejected", "Send", "Listen", "ForwardTo", "MaxSizeInMegabytes", "SessionId",
    "PartitionKey", "MessageId", "ForwardDeadLetteredMessagesTo", "com.microsoft:server-busy",
    "x-opt-locked-until", "LISTEN/NOTIFY", "sodalite serve", "$cbs", "$management", "Tick", "Complete",
    "MessageLockLostError", "MaxTransferHopCountExceeded", "DefaultMessageTimeToLive", "MaxDeliveryCount",
    "asyncio", "socket", "sqlite3", "time", "threading", "psycopg", "amqp", "errors", "model", "message",
    "cli", "spark", "server", "amqpclient", "admin", "store", "client", "sodalite.errors", "pyproject.toml",
    "cli → spark → server | amqpclient → admin → store → model → errors",
}
_CALL = re.compile(r"^([A-Za-z_][\w.]*)\(.*\)$")  # Settle(token, COMPLETE, done): the name before the call


def _spans() -> list[tuple[str, str]]:
    """(backticked text, its paragraph) for each code span of the page, outside fenced blocks."""
    text = re.sub(r"```.*?```", "", DOC.read_text(encoding="utf-8"), flags=re.S)
    return [(m.group(1), paragraph) for paragraph in re.split(r"\n\s*\n|\n(?=\s*(?:-|\d+\.) )", text)
            for m in re.finditer(r"`([^`]+)`", paragraph)]


@cache
def _sources() -> dict[Path, str]:
    return {p: p.read_text(encoding="utf-8") for p in SRC.rglob("*.py")}


def _defines(source: str, name: str) -> bool:
    n = re.escape(name)
    return re.search(rf"^\s*(?:async\s+)?(?:def|class)\s+{n}\b|^\s*{n}\s*[:=]|^\s*{n},|import[^\n]*\b{n}\b|"
                     rf"self\.{n}\s*[:=]|\"{n}\"", source, flags=re.M) is not None


def _module_files(name: str) -> list[Path]:
    """Files a backticked module path names (``server/links.py``, ``links.py``, ``model/partition_core/``)."""
    if name.endswith("/"):
        return [SRC / name.rstrip("/")] if (SRC / name.rstrip("/")).is_dir() else []
    if "/" in name:
        return [SRC / name] if (SRC / name).is_file() else []
    return [p for p in _sources() if p.name == name]


def test_every_module_path_the_page_names_exists() -> None:
    paths = {text for text, _ in _spans() if re.fullmatch(r"[\w/]+(?:\.py|/)", text)}
    assert paths, "the page names no module"
    assert sorted(p for p in paths if not _module_files(p)) == []


def test_every_code_name_the_page_names_is_defined() -> None:
    missing = []
    for text, _ in _spans():
        if text in NOT_CODE or re.fullmatch(r"[\w/]+(?:\.py|/)", text):
            continue
        name = (m.group(1) if (m := _CALL.match(text)) else text)
        if not re.fullmatch(r"[A-Za-z_][\w]*(?:\.[A-Za-z_]\w*)*", name):
            missing.append(text)
            continue
        *owner, last = name.split(".")
        if owner:
            head = owner[-1]
            files = [p for p, s in _sources().items()
                     if p.stem == head or re.search(rf"^class\s+{re.escape(head)}\b", s, flags=re.M)]
        else:
            files = list(_sources())
        if not any(_defines(_sources()[p], last) for p in files):
            missing.append(text)
    assert missing == [], "named in docs/architecture.md but defined nowhere in src/sodalite (or add to NOT_CODE)"
