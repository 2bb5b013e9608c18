"""Per-request bookkeeping shared by every route: a request id, and the request count and latency metrics.

A plain ASGI middleware rather than ``@app.middleware("http")``: it does not buffer bodies, and it sees the
final status even for requests answered by the error handlers.
"""

from __future__ import annotations

import re
import time
import uuid

from starlette.types import ASGIApp, Message, Receive, Scope, Send

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
