"""What to tell a user who lacks an optional part (an *extra*) of Sodalite, and how to install it.

Sodalite is not on PyPI, so ``pip install 'sodalite[spark]'`` would fetch nothing (or someone
else's package). The hint names a command that works where this copy came from: from a clone,
``pip install -e '<checkout>[spark]'`` with the real checkout path; from a wheel or a directory
installed with ``pip install <path>``, that path with the extra; otherwise the extra's own
requirements as this installation's metadata lists them.

Standard library only, so every layer (the client library included) may use it.
"""

from __future__ import annotations

import json
import re
import shlex
from importlib import metadata
from pathlib import Path
from urllib.parse import unquote, urlparse

DISTRIBUTION = "sodalite"


class MissingExtra(ImportError):
    """An optional part of Sodalite is used without its extra installed."""

    def __init__(self, extra: str, what: str, cause: BaseException | None = None) -> None:
        missing = f" ({cause})" if cause is not None else ""
        super().__init__(f"{what} needs Sodalite's '{extra}' extra{missing}: {install_command(extra)}")
        self.extra = extra


def checkout_root() -> Path | None:
    """The source checkout this ``sodalite`` package is imported from, if it is one."""
    package = Path(__file__).resolve().parent  # <root>/src/sodalite
    root = package.parent.parent
    pyproject = root / "pyproject.toml"
    if package.parent.name != "src" or not pyproject.is_file():
        return None
    try:
        text = pyproject.read_text(encoding="utf-8")
    except OSError:
        return None
    return root if re.search(r'^name\s*=\s*"sodalite"\s*$', text, re.MULTILINE) else None


def _installed_from() -> Path | None:
    """The local directory or wheel this installation was made from (pip's ``direct_url.json``)."""
    try:
        text = metadata.distribution(DISTRIBUTION).read_text("direct_url.json")
    except (metadata.PackageNotFoundError, OSError):
        return None
    if not text:
        return None
    try:
        url = urlparse(str(json.loads(text).get("url", "")))
    except (ValueError, AttributeError):
        return None
    if url.scheme != "file":
        return None
    path = Path(unquote(url.path))
    return path if path.exists() else None


def _requirements(extra: str) -> list[str]:
    """The extra's requirements from this installation's metadata, markers dropped."""
    try:
        requires = metadata.requires(DISTRIBUTION) or []
    except metadata.PackageNotFoundError:
        return []
    wanted = re.compile(r"""extra\s*==\s*["']""" + re.escape(extra) + r"""["']""")
    return [line.split(";", 1)[0].strip() for line in requires if ";" in line and wanted.search(line.split(";", 1)[1])]


def install_command(extra: str) -> str:
    """A ``pip install`` command that brings in ``extra`` for this copy of Sodalite."""
    root = checkout_root()
    if root is not None:
        return f"pip install -e {shlex.quote(f'{root}[{extra}]')}"
    source = _installed_from()
    if source is not None:
        return f"pip install {shlex.quote(f'{source}[{extra}]')}"
    requirements = _requirements(extra)
    if requirements:
        return "pip install " + " ".join(shlex.quote(r) for r in requirements)
    return f"pip install -e '<your Sodalite checkout>[{extra}]'"
