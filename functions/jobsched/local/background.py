"""An HTTP server serving on a daemon thread: the local API front and the moto server."""

from __future__ import annotations

import threading
from http.server import HTTPServer


class BackgroundServer:
    def __init__(self, server: HTTPServer, thread_name: str) -> None:
        self._server = server
        self._thread = threading.Thread(target=self._server.serve_forever, name=thread_name, daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        name = host.decode() if isinstance(host, bytes) else host
        return f"http://{name}:{port}"

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)
