"""The HTTP service and its web page: ``create_app(ServeSettings(...))`` or ``facefuse serve``."""

from .app import create_app
from .settings import ServeSettings

__all__ = ["ServeSettings", "create_app"]
