"""Every failure becomes ``{"error": {"code", "message", "hint", "details"}}`` with the status from the one table.

Statuses come only from :data:`facefuse.errors.ERROR_TABLE`. Framework errors (unknown route, wrong method,
malformed parameters) are translated into the same shape, and anything unexpected becomes a logged ``INTERNAL``
answer whose body names the request id, never a traceback.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect
from starlette.routing import BaseRoute, Match

from ..errors import ERROR_TABLE, ErrorCode, FacefuseError
from ..schema import validation_problems
from .scheduler import ClientGone

log = logging.getLogger("facefuse.serve")

# the client went away before its answer (nginx's 499, the table's CANCELLED); only the metrics see it
CLIENT_CLOSED = ERROR_TABLE[ErrorCode.CANCELLED].http_status

# the framework's own refusals, by status, as the table's codes
_FRAMEWORK_CODES = {ERROR_TABLE[code].http_status: code
                    for code in (ErrorCode.NOT_FOUND, ErrorCode.METHOD_NOT_ALLOWED, ErrorCode.UNAUTHORIZED)}


def public(exc: FacefuseError) -> FacefuseError:
    """What a client may see of ``exc``: model and internal errors lose their message details (paths)."""
    if not exc.kind.server_side:
        return exc
    return FacefuseError(exc.code, "a model this server needs is not usable" if exc.code is not ErrorCode.INTERNAL
                         else "unexpected error on the server", "the operator can find the cause in the server log")


def error_response(exc: FacefuseError, request_id: str | None = None,
                   headers: dict[str, str] | None = None) -> JSONResponse:
    headers = dict(headers or {})
    if exc.code is ErrorCode.QUEUE_FULL:
        headers["Retry-After"] = str(exc.details.get("retry_after_s", 1))
    if exc.code is ErrorCode.UNAUTHORIZED:
        headers["WWW-Authenticate"] = "Bearer"
    if exc.kind.closes_connection:
        headers["Connection"] = "close"
    if request_id:
        headers["X-Request-ID"] = request_id
    body = {"error": exc.to_dict(), "request_id": request_id}
    return JSONResponse(body, status_code=exc.http_status, headers=headers)


def _request_id(request: Request) -> str | None:
    return getattr(request.state, "request_id", None)


async def _facefuse_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, FacefuseError)
    if exc.kind.server_side:
        log.error("request %s: %s", _request_id(request), exc)
    return error_response(public(exc), _request_id(request))


async def _framework_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    code = _FRAMEWORK_CODES.get(exc.status_code, ErrorCode.BAD_REQUEST)
    headers = dict(exc.headers or {})
    if exc.status_code == 405:  # Allow (RFC 9110): every method of every route on this path, not only the first's
        allowed = _allowed_methods(request)
        if "GET" in allowed:  # middleware.HeadAsGet answers HEAD wherever GET is
            allowed.add("HEAD")
        headers["Allow"] = ", ".join(sorted(allowed))
    return error_response(FacefuseError(code, str(exc.detail), "see /docs for the endpoints and their methods"),
                          _request_id(request), headers)


def _allowed_methods(request: Request) -> set[str]:
    scope = {**request.scope, "method": "GET"}
    return {method for route in _leaf_routes(request.app.router.routes)
            if route.matches(scope)[0] != Match.NONE for method in getattr(route, "methods", None) or ()}


def _leaf_routes(routes: Iterable[BaseRoute]) -> Iterator[BaseRoute]:
    """Every route, routers included with ``include_router`` opened up (FastAPI nests them when they have a
    lifespan of their own)."""
    for route in routes:
        nested = getattr(route, "original_router", None)
        yield from _leaf_routes(nested.routes) if nested is not None else (route,)


async def _validation_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    return error_response(FacefuseError(ErrorCode.BAD_REQUEST, "the request does not match the API",
                                        "see /docs", {"problems": validation_problems(exc.errors())}),
                          _request_id(request))


async def _client_gone(request: Request, exc: Exception) -> Response:
    """The client hung up (while uploading, or while its work waited): nobody reads the answer."""
    return Response(status_code=CLIENT_CLOSED)


async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
    request_id = _request_id(request)
    log.exception("request %s failed unexpectedly", request_id, exc_info=exc)
    return error_response(FacefuseError(ErrorCode.INTERNAL, f"unexpected {type(exc).__name__} on the server",
                                        "report the request id to the operator; the log has the details"),
                          request_id)


def install_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(FacefuseError, _facefuse_error)
    app.add_exception_handler(StarletteHTTPException, _framework_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(ClientGone, _client_gone)
    app.add_exception_handler(ClientDisconnect, _client_gone)
    app.add_exception_handler(Exception, _unexpected)
