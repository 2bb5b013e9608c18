"""Where the single web page lives (package data, so it works offline and from an installed wheel)."""

from __future__ import annotations

from pathlib import Path

from fastapi import APIRouter
from fastapi.responses import FileResponse

WEB_DIR = Path(__file__).with_name("web")

# The page loads nothing from elsewhere: scripts, styles and images come from this server or from blob: URLs.
CONTENT_SECURITY_POLICY = ("default-src 'self'; img-src 'self' blob: data:; media-src 'self' blob: mediastream:; "
                           "connect-src 'self'; style-src 'self'; script-src 'self'; frame-ancestors 'none'")

page_assets = APIRouter(include_in_schema=False)


@page_assets.get("/favicon.ico")
async def favicon() -> FileResponse:
    """Browsers ask every site for it; without it each page view logged a 404 in the browser's console."""
    return FileResponse(WEB_DIR / "favicon.ico", media_type="image/x-icon", headers={"Cache-Control": "max-age=86400"})
