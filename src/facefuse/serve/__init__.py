"""The HTTP service and its web page: ``create_app(ServeSettings(...))`` or ``facefuse serve``.

``create_app`` is imported on first use: FastAPI costs ~0.3 s to import, which `facefuse detect` and the library
should not pay.
"""

from __future__ import annotations

from typing import Any

from .settings import ServeSettings

__all__ = ["ServeSettings", "create_app"]


def __getattr__(name: str) -> Any:
    if name == "create_app":
        from .app import create_app

        return create_app
    raise AttributeError(name)
