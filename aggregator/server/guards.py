"""The HTTP edge's guards: what the server checks before any route runs and before it reads a
request body.

Outermost, Starlette's ``TrustedHostMiddleware`` answers 400 to a request whose ``Host`` header
names no allowed host (``allowed_hosts``; by default the loopback names and the ``listen``
address when it is not a wildcard): a web page a browser on the server's machine loads from
another site cannot reach a loopback API by pointing its own name at 127.0.0.1 (DNS rebinding).

Then :class:`RequestGate` looks at the request line and headers only:

* with tokens configured, every ``/api/`` path but ``/api/health`` needs one
  (``Authorization: Bearer TOKEN``): reading (GET, HEAD) a read or operator token, anything else
  an operator token. No token, or one the server does not know, is a 401 with
  ``WWW-Authenticate: Bearer``; a read token where an operator token is needed is a 403.
* a body larger than ``max_request_bytes`` is a 413: at once when ``Content-Length`` says so,
  else as soon as the streamed body passes the limit, before the route parses it.

So a request without a valid token costs the server its headers, never its body.
"""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from typing import Any, Literal

from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.responses import JSONResponse

from .config import LOOPBACK_HOSTS  # noqa: F401  (the doctests use it)

__all__ = [
    "Refusal",
    "RequestGate",
    "Tokens",
    "body_refusal",
    "install_guards",
    "required_role",
    "token_refusal",
    "trusted_hosts",
]

#: Paths under ``/api/`` that need no token (load balancers and health checks call them).
PUBLIC_API_PATHS = frozenset({"/api/health"})
_WILDCARDS = frozenset({"", "0.0.0.0", "::", "[::]"})

Role = Literal["read", "operator"]
Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]


@dataclass(frozen=True)
class Refusal:
    """The answer to a request the edge refuses: status, one ``detail`` line, extra headers."""

    status: int
    detail: str
    headers: tuple[tuple[str, str], ...] = ()

    def response(self) -> JSONResponse:
        return JSONResponse({"detail": self.detail}, status_code=self.status, headers=dict(self.headers))


@dataclass(frozen=True)
class Tokens:
    """The configured bearer tokens; with none, the API is open."""

    read: tuple[str, ...] = ()
    operator: tuple[str, ...] = ()

    def role_of(self, token: str) -> Role | None:
        """The role ``token`` grants (compared in constant time with every token), or None.

        Examples
        --------
        >>> Tokens(read=("r",), operator=("o",)).role_of("o")
        'operator'
        >>> Tokens(read=("r",), operator=("o",)).role_of("x") is None
        True
        >>> Tokens(read=("r",)).role_of("caf\xe9") is None
        True
        """
        given = token.encode()  # as bytes: compare_digest refuses non-ASCII text
        operator = any([hmac.compare_digest(given, t.encode()) for t in self.operator])
        read = any([hmac.compare_digest(given, t.encode()) for t in self.read])
        return "operator" if operator else "read" if read else None


def required_role(method: str, path: str) -> Role | None:
    """The role a request needs: None for the dashboard, ``/metrics``, the OpenAPI document and
    ``/api/health``; ``read`` to read any other ``/api/`` path, ``operator`` to change anything.

    Examples
    --------
    >>> required_role("GET", "/api/jobs"), required_role("POST", "/api/jobs"), required_role("GET", "/")
    ('read', 'operator', None)
    """
    if not path.startswith("/api/") or path in PUBLIC_API_PATHS:
        return None
    return "read" if method in ("GET", "HEAD") else "operator"


def token_refusal(role: Role | None, authorization: str | None, tokens: Tokens) -> Refusal | None:
    """Why a request needing ``role`` with this ``Authorization`` header is refused, or None.

    Examples
    --------
    >>> tokens = Tokens(read=("r",), operator=("o",))
    >>> token_refusal("read", "Bearer r", tokens) is None
    True
    >>> token_refusal("read", "Bearer nope", tokens).status
    401
    >>> token_refusal("operator", "Bearer r", tokens).status
    403
    """
    if role is None or not (tokens.read or tokens.operator):
        return None
    token = authorization[7:].strip() if authorization and authorization.startswith("Bearer ") else ""
    if not token:
        return Refusal(401, "a bearer token is required", (("WWW-Authenticate", "Bearer"),))
    granted = tokens.role_of(token)
    if granted is None:
        return Refusal(401, "this bearer token is not known", (("WWW-Authenticate", 'Bearer error="invalid_token"'),))
    if role == "operator" and granted != "operator":
        return Refusal(403, "this token may not change anything")
    return None


def body_refusal(content_length: str | None, limit: int) -> Refusal | None:
    """A 413 when ``Content-Length`` exceeds ``limit`` bytes, a 400 when it is not a count.

    Examples
    --------
    >>> body_refusal("10", 100) is None, body_refusal(None, 100) is None
    (True, True)
    >>> body_refusal("101", 100).status, body_refusal("-1", 100).status
    (413, 400)
    """
    if content_length is None:
        return None
    text = content_length.strip()
    if not text.isdecimal() or len(text) > 20:
        return Refusal(400, "Content-Length must be a byte count")
    if int(text) > limit:
        return _too_large(limit)
    return None


def _too_large(limit: int) -> Refusal:
    return Refusal(413, f"the request body exceeds the server's limit of {limit} bytes")


class RequestGate:
    """ASGI middleware: token and body-size checks from the headers, before the app reads the
    body; a streamed body is cut off with a 413 once it passes ``max_body`` bytes."""

    def __init__(self, app: Callable, *, tokens: Tokens, max_body: int) -> None:
        self.app, self.tokens, self.max_body = app, tokens, max_body

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        refusal = token_refusal(
            required_role(scope["method"], scope["path"]), headers.get("authorization"), self.tokens
        ) or body_refusal(headers.get("content-length"), self.max_body)
        if refusal is not None:
            await refusal.response()(scope, receive, send)
            return
        received, started, cut_off = 0, False, False

        async def counted_receive() -> Message:
            nonlocal received, cut_off
            if cut_off:
                return {"type": "http.disconnect"}
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_body:  # answer 413 now; the app sees the client gone
                    cut_off = True
                    if not started:
                        await _too_large(self.max_body).response()(scope, receive, send)
                    return {"type": "http.disconnect"}
            return message

        async def watched_send(message: Message) -> None:
            nonlocal started
            if cut_off:
                return  # the 413 was the answer
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, counted_receive, watched_send)
        except Exception:
            if not cut_off:
                raise


def trusted_hosts(allowed: tuple[str, ...], listen: str) -> tuple[str, ...]:
    """The ``Host`` names the server answers: ``allowed`` plus the ``listen`` address when it is
    a specific one (an IPv6 literal in brackets, as it appears in a ``Host`` header).

    Examples
    --------
    >>> trusted_hosts(LOOPBACK_HOSTS, "10.0.0.5")
    ('localhost', '127.0.0.1', '[::1]', '10.0.0.5')
    >>> trusted_hosts(LOOPBACK_HOSTS, "0.0.0.0")
    ('localhost', '127.0.0.1', '[::1]')
    """
    if listen in _WILDCARDS:
        return allowed
    host = f"[{listen}]" if ":" in listen and not listen.startswith("[") else listen
    return allowed if host in allowed else (*allowed, host)


def install_guards(app, config) -> None:
    """Put the edge's guards in front of ``app`` (a FastAPI app) for a ``ServerConfig``."""
    app.add_middleware(
        RequestGate, tokens=Tokens(config.read_tokens, config.operator_tokens), max_body=config.max_request_bytes
    )
    app.add_middleware(TrustedHostMiddleware, allowed_hosts=list(trusted_hosts(config.allowed_hosts, config.listen)))
