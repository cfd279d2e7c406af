"""How ``wheelfed train`` and ``wheelfed model`` reach a running ``wheelfed server``: its REST API
over HTTP with the standard library's ``urllib`` (no dependency the gateway would have to carry).

A server is configured by ``--server URL`` or ``$WHEELFED_SERVER``. Its bearer token comes from
``--token-file FILE`` or ``$WHEELFED_TOKEN`` -- never from the command line, where ``ps`` and the
shell's history would show it. Without a configured server the commands work as before, on the
broker and a local registry file.

Every failure is one line (``CliError``/``UsageError``, printed by ``main``):

* the server cannot be reached (refused, no answer, not a WheelFed server): exit 1;
* 401 (no token, or one the server does not know) and 403 (a read-only token for a change): exit 1,
  naming the role the request
  needs -- reading needs a read or operator token, starting, cancelling, deploying and rolling
  back an operator token;
* 422 -- the server refused a value the command line gave: exit 2, as a bad option is locally;
* any other 4xx (an unknown model or job, a request the state does not allow), with the
  server's own message, and 5xx: exit 1.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import socket
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from edge_client.cli.arguments import existing_file
from edge_client.cli.errors import RUNTIME, USAGE, CliError, UsageError

__all__ = [
    "SERVER_VARIABLE",
    "TOKEN_VARIABLE",
    "ServerClient",
    "ServerRefused",
    "add_server_options",
    "server_client",
    "server_url",
]

SERVER_VARIABLE = "WHEELFED_SERVER"
TOKEN_VARIABLE = "WHEELFED_TOKEN"
#: Seconds a request waits for the server (a deploy waits longer: the server waits for the gateways).
TIMEOUT_S = 30.0


def server_url(text: str) -> str:
    """``http://host:port`` (optionally with a path prefix), without its trailing ``/``."""
    parts = urllib.parse.urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.query or parts.fragment:
        raise argparse.ArgumentTypeError(f"expected the server's URL, e.g. http://127.0.0.1:8080, got {text!r}")
    try:
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number or out of range
    except ValueError:
        raise argparse.ArgumentTypeError(f"bad port in {text!r}") from None
    return text.rstrip("/")


server_url.__name__ = "server URL"


def add_server_options(p: argparse.ArgumentParser) -> None:
    """``--server URL`` and ``--token-file FILE``: the same spelling on every command that has them."""
    p.add_argument(
        "--server",
        type=server_url,
        metavar="URL",
        help=f"a running wheelfed server: go through its REST API instead of the broker and a local "
        f"registry (default: ${SERVER_VARIABLE} if set)",
    )
    p.add_argument(
        "--token-file",
        type=existing_file,
        metavar="FILE",
        help=f"file holding the server's bearer token (default: ${TOKEN_VARIABLE}; never on the command line)",
    )


def server_client(args: argparse.Namespace) -> ServerClient | None:
    """The configured server (``--server`` or ``$WHEELFED_SERVER``), or None: work locally."""
    url = args.server
    if url is None and os.environ.get(SERVER_VARIABLE):
        try:
            url = server_url(os.environ[SERVER_VARIABLE])
        except argparse.ArgumentTypeError as exc:
            raise UsageError(f"${SERVER_VARIABLE}: {exc}") from None
    if url is None:
        if args.token_file is not None:
            raise UsageError(f"--token-file is for a server: add --server URL (or set ${SERVER_VARIABLE})")
        return None
    token = os.environ.get(TOKEN_VARIABLE) or None
    if args.token_file is not None:
        token = Path(args.token_file).read_text().strip()
        if not token or len(token.splitlines()) != 1:
            raise UsageError(f"--token-file {args.token_file}: expected one line holding the token")
    return ServerClient(url, token)


class ServerRefused(CliError):
    """The server answered a request with an HTTP error ``status``; the message is its reason.

    Exit code 2 for 422 (a value the command line gave was refused), else 1."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status
        self.exit_code = USAGE if status == 422 else RUNTIME


def _detail(body: bytes) -> str:
    """The server's ``detail`` as one line: FastAPI's list of validation errors as
    ``field: message; ...``."""
    try:
        detail = json.loads(body).get("detail", "")
    except (ValueError, AttributeError):
        return body.decode(errors="replace").strip()[:200]
    if isinstance(detail, list):
        return "; ".join(
            f"{'.'.join(str(p) for p in item.get('loc', ()) if p != 'body')}: {item.get('msg', '')}"
            if isinstance(item, dict)
            else str(item)
            for item in detail
        )
    return str(detail)


class ServerClient:
    """JSON requests to one server's API, answered as Python values; failures as CLI errors.

    Parameters
    ----------
    url : str
        The server's base URL, e.g. ``http://127.0.0.1:8080``.
    token : str, optional
        Bearer token (``Authorization: Bearer TOKEN``); None for a server without tokens.

    Examples
    --------
    >>> client = ServerClient("http://127.0.0.1:8080")
    >>> client.url
    'http://127.0.0.1:8080'
    """

    def __init__(self, url: str, token: str | None = None) -> None:
        self.url, self._token = url, token

    def get(self, path: str, *, timeout_s: float = TIMEOUT_S, **query: Any) -> Any:
        """GET ``path`` (with ``query``, None values left out) and return its JSON."""
        return self._json(self._send("GET", path, None, query, timeout_s))

    def post(self, path: str, body: dict[str, Any], *, timeout_s: float = TIMEOUT_S) -> Any:
        """POST ``body`` as JSON to ``path`` and return the answer's JSON."""
        return self._json(self._send("POST", path, body, {}, timeout_s))

    def download(self, path: str, *, timeout_s: float = TIMEOUT_S) -> bytes:
        """GET ``path``'s bytes (a model's CBOR)."""
        return self._send("GET", path, None, {}, timeout_s)[0]

    def pages(self, path: str, *, limit: int = 1000, **query: Any) -> list[Any]:
        """Every item of a paginated list endpoint (``offset``/``limit``), page after page."""
        items: list[Any] = []
        while True:
            page = self.get(path, offset=len(items), limit=limit, **query)
            items.extend(page)
            if len(page) < limit:
                return items

    def _json(self, answer: tuple[bytes, str]) -> Any:
        data, kind = answer
        if "json" not in kind:
            raise CliError(
                f"{self.url} did not answer as a wheelfed server (got {kind or 'no content type'}); "
                f"check --server or ${SERVER_VARIABLE}"
            )
        return json.loads(data)

    def _send(
        self, method: str, path: str, body: dict[str, Any] | None, query: dict[str, Any], timeout_s: float
    ) -> tuple[bytes, str]:
        params = urllib.parse.urlencode({k: v for k, v in query.items() if v is not None})
        headers = {"Accept": "application/json, application/cbor"}
        if body is not None:
            headers["Content-Type"] = "application/json"
        if self._token:
            headers["Authorization"] = f"Bearer {self._token}"
        request = urllib.request.Request(
            f"{self.url}{path}{'?' + params if params else ''}",
            method=method,
            data=None if body is None else json.dumps(body).encode(),
            headers=headers,
        )
        try:
            with urllib.request.urlopen(request, timeout=timeout_s) as response:
                return response.read(), response.headers.get("Content-Type", "")
        except urllib.error.HTTPError as exc:
            raise self._refused(method, exc.code, _detail(exc.read())) from None
        except urllib.error.URLError as exc:
            reason = exc.reason
            what = (reason.strerror or str(reason)) if isinstance(reason, OSError) else str(reason)
            if isinstance(reason, socket.timeout):
                what = f"no answer within {timeout_s:g} s"
            raise CliError(
                f"cannot reach the server at {self.url}: {what.lower()} (is wheelfed server running "
                f"there? check --server or ${SERVER_VARIABLE})"
            ) from None
        except (TimeoutError, socket.timeout):
            raise CliError(f"the server at {self.url} did not answer within {timeout_s:g} s") from None
        except (ConnectionError, http.client.HTTPException) as exc:
            raise CliError(
                f"the server at {self.url} broke off the answer ({type(exc).__name__}); is it a wheelfed server?"
            ) from None

    def _refused(self, method: str, code: int, detail: str) -> ServerRefused:
        role = "a read or operator token" if method == "GET" else "an operator token"
        if code == 401 and self._token:
            text = f"the server at {self.url} refused the token: this needs {role} ({detail or 'unknown token'})"
        elif code == 401:
            text = (
                f"the server at {self.url} needs a bearer token: this needs {role} (put it in "
                f"${TOKEN_VARIABLE} or in a file given as --token-file)"
            )
        elif code == 403:
            text = f"the server at {self.url} refused the token: this needs {role} ({detail})"
        elif code == 422:
            text = f"the server refused the request: {detail}"
        elif code >= 500:
            text = f"the server at {self.url} failed ({code}): {detail or 'no detail'}; its log says more"
        else:
            text = detail or f"the server answered {code}"
        return ServerRefused(text, code)
