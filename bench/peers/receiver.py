"""The one effect every system's jobs have: an HTTP POST to this loopback receiver, which
records when each job's request arrived (epoch seconds, taken as its handler starts).

A request names its job by `id` in its JSON body: at the top level (the peers' effect,
effect.post) or in `payload` (jobsched's HTTP target sends its envelope, the job's payload
inside). Every arrival is kept, so a job whose effect ran twice is counted as a duplicate."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


def job_id(body: Any) -> str | None:
    if not isinstance(body, dict):
        return None
    if isinstance(body.get("payload"), dict) and "id" in body["payload"]:
        return str(body["payload"]["id"])
    return str(body["id"]) if "id" in body else None


class Receiver:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.arrivals: dict[str, list[float]] = {}
        self.unknown = 0
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive: jobsched's worker reuses its connections

            def do_POST(self) -> None:
                arrived = time.time()
                length = int(self.headers.get("Content-Length") or 0)
                data = self.rfile.read(length)
                try:
                    key = job_id(json.loads(data))
                except ValueError:
                    key = None
                with receiver._lock:
                    if key is None:
                        receiver.unknown += 1
                    else:
                        receiver.arrivals.setdefault(key, []).append(arrived)
                payload = b'{"ok":true}'
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        class Server(ThreadingHTTPServer):
            request_queue_size = 1024  # a burst's connections are not refused at the listen queue
            daemon_threads = True

        self._server = Server(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, name="receiver", daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/effect"

    def take(self, ids: set[str]) -> dict[str, list[float]]:
        """The arrivals of these jobs so far (forgotten here)."""
        with self._lock:
            return {k: self.arrivals.pop(k) for k in list(self.arrivals) if k in ids}

    def seen(self, ids: set[str]) -> int:
        with self._lock:
            return sum(1 for k in ids if k in self.arrivals)

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
