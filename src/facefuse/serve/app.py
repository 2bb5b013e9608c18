"""The app factory: ``create_app(settings)`` builds one independent service (its own metrics, queue and models).

Why a factory and not a module-level app: tests and embedders can run several differently configured services in
one process, and nothing is loaded at import time.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from importlib.metadata import version

from fastapi import FastAPI
from fastapi.middleware.cors import CORSMiddleware
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse
from fastapi.routing import APIRoute
from fastapi.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from swagger_ui_bundle import swagger_ui_path

from ..config import StoreConfig
from .backend import FusionBackend, LocalBackend
from .http_errors import install_error_handlers
from .jobs_routes import jobs_api
from .live_routes import live_api
from .metrics import ServiceMetrics
from .middleware import HeadAsGet, HostCheck, RequestContext
from .openapi import install_openapi
from .routes import api, ops
from .settings import ServeSettings
from .state import ServiceState
from .web import WEB_DIR, page_assets


class SecurityHeaders:
    """Headers every answer carries: browsers must not guess content types nor leak the page address."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = list(message.get("headers", [])) + [
                    (b"x-content-type-options", b"nosniff"),
                    (b"referrer-policy", b"no-referrer"),
                ]
            await send(message)

        await self.app(scope, receive, send_with_headers if scope["type"] == "http" else send)


def _serve_docs_offline(app: FastAPI) -> None:
    """Swagger UI from the installed swagger-ui-bundle package instead of FastAPI's default CDN, so /docs works
    on a machine without internet like everything else here."""
    app.mount("/docs-assets", StaticFiles(directory=swagger_ui_path), name="docs-assets")

    @app.get("/docs", include_in_schema=False)
    async def docs() -> HTMLResponse:
        return get_swagger_ui_html(openapi_url=app.openapi_url or "/openapi.json", title="facefuse API",
                                   swagger_js_url="/docs-assets/swagger-ui-bundle.js",
                                   swagger_css_url="/docs-assets/swagger-ui.css",
                                   swagger_favicon_url="/docs-assets/favicon-32x32.png")


def create_app(settings: ServeSettings | None = None, *, store: StoreConfig | None = None,
               backend: FusionBackend | None = None) -> FastAPI:
    """The service; ``backend`` runs the models (default: :class:`LocalBackend`, this process). The Ray Serve
    ingress passes a ``RayBackend`` here — every route, limit and error is the same either way."""
    settings = settings or ServeSettings()
    store = store or StoreConfig.from_env()
    metrics = ServiceMetrics(settings.max_batch)
    state = ServiceState(settings=settings, store=store, metrics=metrics,
                         backend=backend or LocalBackend(settings, store))

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await state.backend.start(metrics)
        try:
            yield
        finally:
            await state.backend.stop()

    app = FastAPI(title="facefuse", version=version("facefuse"), lifespan=lifespan, docs_url=None, redoc_url=None,
                  generate_unique_id_function=lambda route: route.name,  # operationIds: fuse, detect, healthz…
                  description="Offline face fusion. Results are AI-generated and labelled as such; "
                              "fusing someone's face needs their consent.")
    app.state.service = state
    install_error_handlers(app)
    app.include_router(api)
    app.include_router(ops)
    app.include_router(jobs_api)  # batch jobs, with their own lifespan (runner start/stop)
    app.include_router(live_api)  # the live camera WebSocket, with its session slots
    app.include_router(page_assets)  # /favicon.ico
    app.mount("/static", StaticFiles(directory=WEB_DIR), name="static")
    _serve_docs_offline(app)
    keyed = {route.path for router in (api, jobs_api) for route in router.routes if isinstance(route, APIRoute)}
    install_openapi(app, settings, state.fuse_models, keyed_paths=keyed)
    if settings.cors_origin:
        app.add_middleware(CORSMiddleware, allow_origins=settings.cors_origin, allow_methods=["GET", "POST", "DELETE"],
                           allow_headers=["Authorization", "Content-Type", "X-Request-ID"],
                           expose_headers=["Server-Timing", "X-Request-ID", "Retry-After"])
    app.add_middleware(SecurityHeaders)
    app.add_middleware(HostCheck, hosts=settings.hosts_accepted)
    app.add_middleware(HeadAsGet)
    app.add_middleware(RequestContext, metrics=metrics)
    return app
