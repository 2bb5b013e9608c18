"""How the service is put on a socket: uvicorn with a header timeout, shared by `facefuse serve` and the tests.

Why a protocol subclass: uvicorn closes an idle keep-alive connection only after it answered something, and never
closes a connection whose request line or headers arrive slowly or not at all, so idle or slow-header clients
(a slowloris attack needs no bandwidth) could hold sockets forever. :class:`HeaderTimeoutProtocol` closes a
connection whose headers are not complete ``header_timeout_s`` after it opened or after its last answer. The body
has its own limit (``upload_timeout_s``, enforced where it is read: :mod:`facefuse.serve.uploads`).
"""

from __future__ import annotations

import asyncio
from typing import Any

import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from .settings import ServeSettings


class HeaderTimeoutProtocol(HttpToolsProtocol):
    header_timeout_s: float = 10.0

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self._header_timer: asyncio.TimerHandle | None = None
        super().connection_made(transport)
        self._arm()

    def _arm(self) -> None:
        self._disarm()
        self._header_timer = self.loop.call_later(self.header_timeout_s, self._headers_too_slow)

    def _disarm(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _headers_too_slow(self) -> None:
        self._header_timer = None
        if not self.transport.is_closing():
            self.transport.close()

    def on_headers_complete(self) -> None:
        self._disarm()
        super().on_headers_complete()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing():
            self._arm()  # the next request's headers get the same time

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)


def server_config(app: Any, settings: ServeSettings, **options: Any) -> uvicorn.Config:
    """uvicorn's configuration for ``app``: our protocol with the settings' header timeout, no Server header."""
    protocol = type("FacefuseHttpProtocol", (HeaderTimeoutProtocol,), {"header_timeout_s": settings.header_timeout_s})
    return uvicorn.Config(app, host=settings.host, port=settings.port, http=protocol, server_header=False,
                          **options)
