"""The HTTP service and its web page: ``create_app(ServeSettings(...))`` or ``facefuse serve``; on Ray Serve,
``ray_app(ServeSettings(...))`` or ``facefuse serve --backend ray``.

Both are imported on first use: FastAPI costs ~0.3 s to import, which `facefuse detect` and the library should not
pay, and Ray (an optional extra) is imported only by ``ray_app``.
"""

from __future__ import annotations

from typing import Any

from .settings import ServeSettings

__all__ = ["ServeSettings", "create_app", "ray_app"]


def __getattr__(name: str) -> Any:
    if name == "create_app":
        from .app import create_app

        return create_app
    if name == "ray_app":
        from .ray_serve import ray_app

        return ray_app
    raise AttributeError(name)
