"""A blocking client of the management REST API, for the command line's entity commands.

It sends what ServiceBusAdministrationClient sends (sdk-wire-contract.md 8.2): ATOM entries
written and read by :mod:`sodalite.admin.atom`, a SAS token for the ``https://host:port``
audience, ``If-Match: *`` on update, and follows a feed's ``next`` link to list everything.
"""

from __future__ import annotations

import json
import ssl
import time
import urllib.error
import urllib.request
import xml.etree.ElementTree as ET
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import quote, urlsplit

import defusedxml.ElementTree as _defused  # type: ignore[import-untyped, unused-ignore]

from sodalite.admin import atom
from sodalite.model import sas

API_VERSION: Final = "2021-05"
TOKEN_LIFETIME_S: Final = 600
_ATOM: Final = f"{{{atom.ATOM_NS}}}"


class AdminError(Exception):
    """The management API answered with an error status; ``detail`` is its ``<Detail>`` text."""

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(f"HTTP {status}: {detail}")
        self.status = status
        self.detail = detail


@dataclass(frozen=True, slots=True)
class Listed:
    """One entry of a GET or a list: the entity's own name and its parsed description."""

    title: str
    parsed: atom.ParsedDescription


def _detail(body: bytes) -> str:
    try:
        root = _defused.fromstring(body)
    except ET.ParseError:
        return body.decode("utf-8", "replace").strip()
    found = root.find("Detail")
    return (found.text or "").strip() if found is not None else body.decode("utf-8", "replace").strip()


def reason_text(reason: object) -> str:
    """Why a request did not reach the broker, with a hint for a certificate it does not trust."""
    if isinstance(reason, ssl.SSLCertVerificationError):
        return (f"{reason.verify_message or reason} (trust the broker's certificate with --ca-file, or run "
                "from the directory that holds sodalite-data/)")
    return str(reason.strerror if isinstance(reason, OSError) and reason.strerror else reason)


def _entries(feed: bytes) -> tuple[list[Listed], str | None]:
    """(the feed's entries, its ``next`` link), or ([], None) for the empty feed of a missing entity."""
    root = _defused.fromstring(feed)
    if root.tag == f"{_ATOM}entry":
        entries = [root]
        next_link = None
    else:
        entries = root.findall(f"{_ATOM}entry")
        next_link = next((link.get("href") for link in root.findall(f"{_ATOM}link") if link.get("rel") == "next"),
                         None)
    listed = []
    for entry in entries:
        title = entry.findtext(f"{_ATOM}title") or ""
        listed.append(Listed(title, atom.parse_description(ET.tostring(entry))))
    return listed, next_link


class AdminClient:
    def __init__(self, host: str, port: int, key_name: str, key: str, *, context: ssl.SSLContext | None,
                 timeout: float = 30.0) -> None:
        scheme = "https" if context is not None else "http"
        self.base_url = f"{scheme}://{host}:{port}"
        self._key_name, self._key, self._context, self._timeout = key_name, key, context, timeout

    def _token(self) -> str:
        return sas.generate_token(self.base_url, self._key_name, self._key, int(time.time()) + TOKEN_LIFETIME_S)

    def _call(self, method: str, url: str, body: bytes | None = None, *, update: bool = False,
              content_type: str = "application/atom+xml;type=entry;charset=utf-8") -> tuple[int, bytes]:
        headers = {"Authorization": self._token()}
        if body is not None:
            headers["Content-Type"] = content_type
        if update:
            headers["If-Match"] = "*"
        request = urllib.request.Request(url, data=body, headers=headers, method=method)
        try:
            with urllib.request.urlopen(request, timeout=self._timeout, context=self._context) as response:
                return int(response.status), bytes(response.read())
        except urllib.error.HTTPError as exc:
            raise AdminError(exc.code, _detail(exc.read())) from None
        except urllib.error.URLError as exc:
            raise ConnectionError(f"at {method} {url}: {reason_text(exc.reason)}") from None
        except OSError as exc:  # a timeout or a reset while reading the answer
            raise ConnectionError(f"at {method} {url}: {reason_text(exc)}") from None

    def _url(self, path: str, query: str = "") -> str:
        return f"{self.base_url}/{quote(path, safe='/$')}?api-version={API_VERSION}{query}"

    def raw_get(self, path: str) -> bytes:
        return self._call("GET", self._url(path))[1]

    def get(self, path: str) -> Listed | None:
        """The entity or rule at ``path`` (``orders``, ``t/subscriptions/s``, ...), or None if there is none."""
        _, body = self._call("GET", self._url(path))
        entries, _ = _entries(body)
        return entries[0] if entries else None

    def list(self, collection: str) -> list[Listed]:
        """Every entry of a collection (``$Resources/queues``, ``t/subscriptions``, ...), page after page."""
        url: str | None = self._url(collection, "&$skip=0&$top=100")
        listed: list[Listed] = []
        while url is not None:
            _, body = self._call("GET", url)
            page, next_link = _entries(body)
            listed.extend(page)
            if next_link is not None and urlsplit(next_link).netloc != urlsplit(self.base_url).netloc:
                # The broker writes the host the request named; follow it on the address we dialled.
                parts = urlsplit(next_link)
                next_link = f"{self.base_url}{parts.path}?{parts.query}"
            url = next_link if page else None
        return listed

    def put(self, path: str, entry: bytes, *, update: bool) -> Listed:
        """Create (409 if it exists) or update (404 if it does not) from a request entry."""
        _, body = self._call("PUT", self._url(path), entry, update=update)
        entries, _ = _entries(body)
        if not entries:
            raise AdminError(500, f"the broker answered the PUT of '{path}' without an entry")
        return entries[0]

    def post_json(self, path: str, payload: Mapping[str, object]) -> Any:
        """A JSON request and answer (the regenerate-keys operation)."""
        _, body = self._call("POST", self._url(path), json.dumps(payload).encode(), content_type="application/json")
        return json.loads(body)

    def delete(self, path: str) -> None:
        self._call("DELETE", self._url(path))
