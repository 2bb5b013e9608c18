"""A real HTTP server on 127.0.0.1 that serves a folder and honours Range requests (or ignores them, as some servers
do), recording each request: what the resumable downloads of `facefuse.models.download` are tested against."""

from __future__ import annotations

import contextlib
import http.server
import re
import threading
from collections.abc import Iterator
from pathlib import Path


class RangeServer(http.server.ThreadingHTTPServer):
    """Serves a folder; records (path, Range header, status) of each request; may ignore Range like some servers."""

    def __init__(self, folder: Path, honour_range: bool) -> None:
        self.folder, self.honour_range, self.requests = folder, honour_range, []
        super().__init__(("127.0.0.1", 0), RangeHandler)


class RangeHandler(http.server.BaseHTTPRequestHandler):
    server: RangeServer

    def do_GET(self) -> None:
        path = self.server.folder / self.path.lstrip("/")
        wanted = self.headers.get("Range")
        if not path.is_file():
            self.server.requests.append((self.path, wanted, 404))
            self.send_error(404)
            return
        data = path.read_bytes()
        start = int(re.fullmatch(r"bytes=(\d+)-", wanted).group(1)) if wanted and self.server.honour_range else 0
        status = 416 if start >= len(data) > 0 and wanted else 206 if start else 200
        self.server.requests.append((self.path, wanted, status))
        self.send_response(status)
        body = b"" if status == 416 else data[start:]
        if status == 206:
            self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@contextlib.contextmanager
def serve(folder: Path, honour_range: bool = True) -> Iterator[tuple[RangeServer, str]]:
    server = RangeServer(folder, honour_range)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server, f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
