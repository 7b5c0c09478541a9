"""The downstream of the benchmark's `http` targets: a small threaded HTTP server on 127.0.0.1
that the production HttpTargetClient (its destination policy, its signer) delivers to.

The harness allows it as an operator's HTTP_ALLOW_DESTINATIONS would (`ALLOW`): loopback is
refused to every target otherwise. It answers each delivery as a webhook receiver does, 200
with a small JSON acknowledgement, except the first `fail_first` attempts of each run, which
it answers 503 (the worker retries them). It verifies nothing and keeps only which run keys
it saw and how each attempt was answered."""

from __future__ import annotations

import json
import threading
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

# The destination policy's allow-list entry for the receiver (Settings.http_allow_destinations).
ALLOW = "127.0.0.1/32"
ACKNOWLEDGEMENT = json.dumps({"received": True}).encode()


class Receiver:
    """`with Receiver(fail_first=n) as r:` serves on `r.url` until the block ends."""

    def __init__(self, fail_first: int = 0) -> None:
        self.fail_first = fail_first
        self.attempts: Counter[str] = Counter()  # run key -> deliveries received
        self.succeeded: set[str] = set()  # run keys answered 200
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        assert self._server is not None, "the receiver is not started"
        return f"http://127.0.0.1:{self._server.server_address[1]}/hooks/bench"

    def answer(self, run_key: str) -> int:
        """The status for this delivery of `run_key`: 503 for its first `fail_first`, then 200."""
        with self._lock:
            self.attempts[run_key] += 1
            if self.attempts[run_key] <= self.fail_first:
                return 503
            self.succeeded.add(run_key)
            return 200

    def __enter__(self) -> Receiver:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                status = receiver.answer(self.headers.get("Idempotency-Key", ""))
                body = ACKNOWLEDGEMENT if status == 200 else b'{"error":"unavailable"}'
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass  # not the scheduler's logs: nothing to count

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="bench-receiver", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._server is not None and self._thread is not None
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()
