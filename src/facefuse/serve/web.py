"""Where the single web page lives (package data, so it works offline and from an installed wheel)."""

from __future__ import annotations

from pathlib import Path

WEB_DIR = Path(__file__).with_name("web")

# The page loads nothing from elsewhere: scripts, styles and images come from this server or from blob: URLs.
CONTENT_SECURITY_POLICY = ("default-src 'self'; img-src 'self' blob: data:; media-src 'self' blob: mediastream:; "
                           "connect-src 'self'; style-src 'self'; script-src 'self'; frame-ancestors 'none'")
