"""HEAD answered wherever GET is, and ``Allow`` completed on 405 answers (RFC 9110 §9.3.2 and §15.5.6).

Why a middleware: FastAPI's routes answer only the methods they name, so health checkers' ``HEAD /healthz`` got 405.
Running HEAD as GET and dropping the body serves every GET route, mount and static file the same way, with the
headers (Content-Type, Content-Length) GET would send. The router's 405 names the route's methods in ``Allow``;
HEAD is added next to GET there, since this middleware answers it.
"""

from __future__ import annotations

from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send


class HeadAsGet:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        head = scope["method"] == "HEAD"

        async def send_adjusted(message: Message) -> None:
            if message["type"] == "http.response.start" and message["status"] == 405:
                headers = MutableHeaders(scope=message)
                allowed = [m.strip() for m in headers.get("allow", "").split(",") if m.strip()]
                if "GET" in allowed and "HEAD" not in allowed:
                    headers["allow"] = ", ".join([*allowed, "HEAD"])
            elif message["type"] == "http.response.body" and head:
                message = {**message, "body": b""}
            await send(message)

        await self.app({**scope, "method": "GET"} if head else scope, receive, send_adjusted)
