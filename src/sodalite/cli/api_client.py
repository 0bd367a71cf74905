"""A blocking client of the control plane's JSON API (/api/v1), for the command line's message commands."""

from __future__ import annotations

import json
import ssl
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from typing import Any, Final
from urllib.parse import quote

from sodalite.cli.admin_client import reason_text
from sodalite.model import sas

TOKEN_LIFETIME_S: Final = 600


class ApiError(Exception):
    """The JSON API refused: its HTTP status and the error body's code and message."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(f"HTTP {status} {code}: {message}")
        self.status, self.code, self.message = status, code, message


class ApiClient:
    def __init__(self, host: str, port: int, key_name: str, key: str, *, context: ssl.SSLContext | None,
                 timeout: float = 30.0) -> None:
        scheme = "https" if context is not None else "http"
        self.base_url = f"{scheme}://{host}:{port}/api/v1"
        self._audience = f"{scheme}://{host}:{port}"
        self._key_name, self._key, self._context, self._timeout = key_name, key, context, timeout

    def call(self, method: str, path: str, body: Mapping[str, object] | None = None) -> Any:
        token = sas.generate_token(self._audience, self._key_name, self._key, int(time.time()) + TOKEN_LIFETIME_S)
        headers = {"Authorization": "Bearer " + token, "Accept": "application/json"}
        data = None
        if body is not None:
            headers["Content-Type"] = "application/json"
            data = json.dumps(body).encode()
        request = urllib.request.Request(self.base_url + path, data=data, headers=headers, method=method)
        try:
            with urllib.request.urlopen(request, timeout=self._timeout, context=self._context) as response:
                return json.loads(response.read() or b"null")
        except urllib.error.HTTPError as exc:
            raw = exc.read()
            try:
                error = json.loads(raw)["error"]
                raise ApiError(exc.code, str(error["code"]), str(error["message"])) from None
            except (ValueError, KeyError, TypeError):
                raise ApiError(exc.code, "Error", raw.decode("utf-8", "replace")) from None
        except urllib.error.URLError as exc:  # it never reached the broker: say where it tried (issue 13.14)
            raise ConnectionError(f"at {method} {request.full_url}: {reason_text(exc.reason)}") from None
        except OSError as exc:  # a timeout or a reset while reading the answer
            raise ConnectionError(f"at {method} {request.full_url}: {reason_text(exc)}") from None

    @staticmethod
    def entity(path: str) -> str:
        return "/entities/" + quote(path.strip("/"), safe="/")
