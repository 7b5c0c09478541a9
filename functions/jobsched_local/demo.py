"""`jobsched local --demo`: a guided tour on the running local system.

Creates a 6-field cron every 10 s in Europe/London, a one-time job 15 s out, a flaky Python
handler that retries and dead-letters (then is redriven and succeeds), and an HTTP target
against a receiver on loopback. The console's run table (`console.RunTable`) shows their runs
as they change state, beside those of every other job."""

from __future__ import annotations

import sys
import threading
import time
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, TextIO

from jobsched.client.http import Connection

from .background import quiet_disconnects


class Receiver:
    """A webhook endpoint on loopback that records what it was sent."""

    def __init__(self) -> None:
        received: list[dict[str, Any]] = []

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                received.append({"key": self.headers.get("Idempotency-Key"), "body": self.rfile.read(length)})
                payload = b'{"ok":true}'
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.received = received
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        quiet_disconnects(self._server)
        threading.Thread(target=self._server.serve_forever, name="demo-receiver", daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/hook"

    def stop(self) -> None:
        self._server.shutdown()


class Demo:
    def __init__(self, api_url: str, api_key: str, out: TextIO | None = None) -> None:
        self.api_url = api_url
        self.api_key = api_key
        self.out = out if out is not None else sys.stdout  # the console's writer, once set up
        self.jobs: dict[str, str] = {}  # job id -> label
        self.receiver = Receiver()
        self._redriven: set[str] = set()
        self._api = Connection(api_url, api_key=api_key)  # loopback: no proxy

    def call(self, method: str, path: str, body: Any = None) -> Any:
        """The answer's JSON; raises what `Connection.request` raises (an ApiError on an
        error answer, RedirectRefused for a redirect elsewhere: the key stays here)."""
        return self._api.request(method, path, body).body

    def setup(self) -> None:
        soon = datetime.now(UTC).replace(microsecond=0)
        specs: dict[str, dict[str, Any]] = {
            "cron-10s-london": {"type": "demo.hello", "cron": "*/10 * * * * *", "timeZone": "Europe/London"},
            "one-time-15s": {"type": "demo.hello", "runAt": _iso(soon + timedelta(seconds=15))},
            "flaky-then-dead": {
                "type": "demo.flaky",
                "runAt": _iso(soon + timedelta(seconds=5)),
                "payload": {"failures": 3},
                "maxAttempts": 3,
                "retry": {"baseSeconds": 2, "capSeconds": 4},
            },
            "webhook-20s": {
                "type": "demo.webhook",
                "every": "PT20S",
                "target": {"kind": "http", "url": self.receiver.url},
            },
        }
        for label, body in specs.items():
            job = self.call("POST", "/v1/jobs", {"name": label, **body})
            self.jobs[job["jobId"]] = label
            print(f"created {label:<16} {job['jobId']}  next run {job.get('nextRunAt')}", file=self.out)
        print(file=self.out, flush=True)

    def watch_once(self) -> None:
        """Redrive the flaky job's run once it is dead (the console's run table shows the rest)."""
        for job_id, label in self.jobs.items():
            runs = self.call("GET", f"/v1/jobs/{job_id}/runs?limit=50").get("items", [])
            for run in runs:
                key = run["runKey"]
                if run["state"] == "DEAD" and key not in self._redriven:
                    self._redriven.add(key)
                    self.call("POST", f"/v1/runs/{key}/redrive", {"reason": "demo: dependency is back"})
                    print(f"{'':<9} {label} redriven: same run key, a new attempt series", file=self.out)

    def run(self, stop: threading.Event, seconds: float | None = None) -> None:
        self.setup()
        deadline = time.monotonic() + seconds if seconds else None
        while not stop.is_set() and (deadline is None or time.monotonic() < deadline):
            try:
                self.watch_once()
            except Exception as exc:  # keep the tour going; the system itself is unaffected
                print(f"demo: {exc}", file=self.out)
            stop.wait(1)
        self.receiver.stop()


def _iso(value: datetime) -> str:
    return value.strftime("%Y-%m-%dT%H:%M:%SZ")
