"""Per-request bookkeeping shared by every route: a request id, and the request count and latency metrics.

A plain ASGI middleware rather than ``@app.middleware("http")``: it does not buffer bodies, and it sees the
final status even for requests answered by the error handlers.
"""

from __future__ import annotations

import re
import time
import uuid

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..errors import ErrorCode, FacefuseError
from .http_errors import error_response
from .metrics import ServiceMetrics

_CLIENT_ID = re.compile(r"^[A-Za-z0-9._-]{1,64}$")


def route_label(scope: Scope) -> str:
    """The route template (never the raw path, which would make one time series per URL)."""
    route = scope.get("route")
    path = getattr(route, "path", None)
    if path:
        return str(path)
    path = str(scope.get("path", ""))
    for mount in ("/static", "/docs-assets"):
        if path.startswith(mount + "/"):
            return mount
    return "unmatched"


class RequestContext:
    def __init__(self, app: ASGIApp, metrics: ServiceMetrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        given = dict(scope["headers"]).get(b"x-request-id", b"").decode("latin-1")
        request_id = given if _CLIENT_ID.match(given) else uuid.uuid4().hex[:16]
        scope.setdefault("state", {})["request_id"] = request_id
        status = 500  # what the client sees if the app dies before it starts a response

        async def send_with_id(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                headers = [(k, v) for k, v in message.get("headers", []) if k.lower() != b"x-request-id"]
                message["headers"] = headers + [(b"x-request-id", request_id.encode())]
            await send(message)

        start = time.perf_counter()
        self.metrics.in_flight.inc()
        try:
            await self.app(scope, receive, send_with_id)
        finally:
            self.metrics.in_flight.dec()
            route = route_label(scope)
            self.metrics.requests.labels(route, str(status)).inc()
            self.metrics.latency.labels(route).observe(time.perf_counter() - start)


class HostCheck:
    """Answers 400 to a request with no single, well-formed ``Host`` header, or (with an allow-list) one naming a
    host this service does not serve (DNS-rebinding protection).

    Why: a web page on another site can make a victim's browser resolve its own name to 127.0.0.1 and then call a
    service on loopback "same-origin"; the Host header still carries the attacker's name. With no API key that would
    expose the service, so by default a loopback-bound service without a key answers only loopback names
    (``ServeSettings.hosts_accepted``). The header is parsed strictly (RFC 9110 ``uri-host [":" port]``), so
    ``localhost:80@evil.example`` is refused rather than read as ``localhost``; two Host headers are a 400 (RFC 9112
    §3.2), whatever the allow-list.
    """

    def __init__(self, app: ASGIApp, hosts: frozenset[str] | None) -> None:
        self.app = app
        self.hosts = hosts

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            problem = host_problem([value for name, value in scope["headers"] if name == b"host"], self.hosts)
            if problem is not None:
                await error_response(problem)(scope, receive, send)
                return
        await self.app(scope, receive, send)


_HOST = re.compile(r"^(?P<name>\[[0-9a-f:.]+\]|[a-z0-9_.-]+)(?::[0-9]{1,5})?$")


def host_problem(values: list[bytes], hosts: frozenset[str] | None) -> FacefuseError | None:
    """Why these Host header values cannot be answered (None: they can); ``hosts`` is the allow-list (None: any)."""
    if len(values) != 1:
        return FacefuseError(ErrorCode.BAD_REQUEST, f"the request has {len(values)} Host headers, not one",
                             "send exactly one Host header (your HTTP client does this by itself)",
                             {"host_headers": len(values)})
    match = _HOST.match(values[0].decode("latin-1").strip().lower())
    if match is None:
        return FacefuseError(ErrorCode.BAD_REQUEST, "the Host header is not a host name with an optional port",
                             "send 'Host: name' or 'Host: name:port'")
    if hosts is not None and match["name"] not in hosts:
        return FacefuseError(ErrorCode.BAD_REQUEST, "this server does not answer for that host name",
                             "use the address the operator gave you, or ask them to add it to --allowed-hosts")
    return None


class HeadAsGet:
    """``HEAD`` on any ``GET`` route: the GET answer's status and headers, without its body.

    Why: health checkers and uptime monitors probe with HEAD, and FastAPI routes declare only GET (405 otherwise).
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "HEAD":
            await self.app(scope, receive, send)
            return

        async def headers_only(message: Message) -> None:
            if message["type"] == "http.response.body":
                if message.get("more_body"):
                    return
                message = {"type": "http.response.body", "body": b"", "more_body": False}
            await send(message)

        await self.app({**scope, "method": "GET"}, receive, headers_only)
