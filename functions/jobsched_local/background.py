"""An HTTP server serving on a daemon thread: the local API front and the moto server."""

from __future__ import annotations

import logging
import sys
import threading
from http.server import HTTPServer
from typing import Any

log = logging.getLogger("jobsched_local")

# A client that hangs up early (`curl .../docs | head`, a timed-out poll) is no fault of the
# server: socketserver would print a full traceback for each one.
CLIENT_GONE = (BrokenPipeError, ConnectionResetError, ConnectionAbortedError)


def quiet_disconnects(server: HTTPServer) -> None:
    """Route the server's request errors through logging: a client that went away is a debug
    line, anything else an error with its traceback."""

    def handle_error(request: Any, client_address: Any) -> None:
        error = sys.exc_info()[1]
        if isinstance(error, CLIENT_GONE):
            log.debug("client %s went away: %s", client_address, error)
            return
        log.error("request from %s failed", client_address, exc_info=True)

    server.handle_error = handle_error  # type: ignore[method-assign]


class BackgroundServer:
    def __init__(self, server: HTTPServer, thread_name: str) -> None:
        self._server = server
        quiet_disconnects(server)
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
