"""The downstream of chaos's `chaos.http` jobs: a small threaded HTTP server on 127.0.0.1
that the production HttpTargetClient (with its signer and its destination policy) delivers
webhooks to.

Every delivery is recorded in the effect ledger as it arrives and ends when it is answered,
keyed by the run key the worker sends (`Idempotency-Key`, equal to `X-Jobsched-Run-Key`)
and the attempt (`X-Jobsched-Attempt`), with the tenant and type from the body's envelope.
It acts on every delivery it accepts, whatever the key says (a receiver that deduplicated
would hide a repeated effect from the checker). Each delivery's Standard Webhooks signature
is verified with the `standardwebhooks` package against the secret its job's creation
answered (`trust`): a delivery that fails is not acted on, answered 401 and kept in
`rejected` (the harness reports each as an unexpected error, which fails the run).

Its answers are a real downstream's: mostly 200 with a JSON body, sometimes 503 (the
worker retries) and sometimes 400 (permanent: the run ends DEAD with `HTTP400`). Which one
is a hash of the seed, the run key and the attempt, so a repeated delivery of one attempt
gets the same answer, whatever thread order the batch ran in."""

from __future__ import annotations

import contextlib
import json
import threading
import zlib
from collections.abc import Callable, Iterator
from datetime import datetime, tzinfo
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from unittest import mock

from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from .ledger import WEBHOOK, Ledger

# The destination policy's allow-list entry for the receiver (Settings.http_allow_destinations),
# in chaos only: loopback is refused to every tenant otherwise.
ALLOW = "127.0.0.1/32"
RETRYABLE_SHARE = 0.15  # answered 503
PERMANENT_SHARE = 0.04  # answered 400


class Receiver:
    def __init__(self, ledger: Ledger, now: Callable[[], datetime], seed: int) -> None:
        self._ledger = ledger
        self._now = now
        self._seed = seed
        self._secrets: dict[str, str] = {}  # job id -> the signing secret its creation answered
        self._lock = threading.Lock()
        self.rejected: list[str] = []  # deliveries whose signature or headers did not verify
        self.answers: dict[int, int] = {}  # status -> deliveries answered with it
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._stack = contextlib.ExitStack()

    @property
    def url(self) -> str:
        assert self._server is not None, "the receiver is not started"
        return f"http://127.0.0.1:{self._server.server_address[1]}/hooks"

    def trust(self, job_id: str, secret: str) -> None:
        """The job's signing secret, as the API answered it (a receiver's configuration)."""
        with self._lock:
            self._secrets[job_id] = secret

    def start(self) -> None:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length)
                try:
                    status, answer = receiver.deliver(dict(self.headers.items()), body)
                except Exception as exc:  # the receiver's own fault: reported, never silent
                    status, answer = receiver._reject("?", f"the receiver failed: {exc!r}")
                data = json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                """Quiet: the ledger is the record."""

        # The package checks the signature's timestamp against its own "now": the receiver's
        # clock is the simulation's true time (the worker signs with its skewed clock).
        self._stack.enter_context(mock.patch("standardwebhooks.webhooks.datetime", _clocked(self._now)))
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="chaos-receiver", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None
        self._stack.close()

    @contextlib.contextmanager
    def running(self) -> Iterator[Receiver]:
        self.start()
        try:
            yield self
        finally:
            self.stop()

    # --- one delivery ---

    def deliver(self, headers: dict[str, str], body: bytes) -> tuple[int, dict[str, Any]]:
        """Record the delivery in the ledger, verify it, and answer it: (status, JSON body)."""
        lowered = {name.lower(): value for name, value in headers.items()}
        run_key = lowered.get("idempotency-key", "")
        try:
            envelope = json.loads(body)
            attempt = int(lowered.get("x-jobsched-attempt", ""))
        except ValueError:
            return self._reject(run_key, f"unreadable delivery: {body[:80]!r}")
        call = self._ledger.begin(
            run_key,
            str(envelope.get("type")),
            attempt,
            str(envelope.get("tenant")),
            WEBHOOK,
            payload=envelope.get("payload"),
        )
        problem = self._verify(lowered, body, envelope, run_key, attempt)
        if problem is not None:
            self._ledger.end(call, acted=False)
            return self._reject(run_key, problem)
        status = self._answer(run_key, attempt)
        self._ledger.end(call, acted=200 <= status < 300)
        with self._lock:
            self.answers[status] = self.answers.get(status, 0) + 1
        if status == 503:
            return status, {"error": "unavailable, try again"}
        if status == 400:
            return status, {"error": "payload rejected"}
        return status, {"received": run_key, "attempt": attempt}

    def _verify(
        self, headers: dict[str, str], body: bytes, envelope: Any, run_key: str, attempt: int
    ) -> str | None:
        """Why the delivery is not one the scheduler sent for this run and attempt, or None."""
        if not isinstance(envelope, dict) or envelope.get("runKey") != run_key:
            return f"Idempotency-Key {run_key!r} is not the body's run key"
        if headers.get("x-jobsched-run-key") != run_key:
            return "X-Jobsched-Run-Key differs from Idempotency-Key"
        if envelope.get("attempt") != attempt:
            return f"X-Jobsched-Attempt {attempt} is not the body's attempt"
        if headers.get("webhook-id") != f"{run_key}#{attempt}":
            return f"webhook-id {headers.get('webhook-id')!r} is not the run key and attempt"
        with self._lock:
            secret = self._secrets.get(str(envelope.get("jobId")))
        if secret is None:
            return f"no signing secret known for job {envelope.get('jobId')}"
        try:
            Webhook(secret).verify(body, headers)
        except WebhookVerificationError as exc:
            return f"signature rejected: {exc}"
        return None

    def _answer(self, run_key: str, attempt: int) -> int:
        share = zlib.crc32(f"{self._seed}/{run_key}/{attempt}".encode()) / 2**32
        if share < PERMANENT_SHARE:
            return 400
        if share < PERMANENT_SHARE + RETRYABLE_SHARE:
            return 503
        return 200

    def _reject(self, run_key: str, problem: str) -> tuple[int, dict[str, Any]]:
        with self._lock:
            self.rejected.append(f"{run_key}: {problem}")
        return 401, {"error": "unverified delivery"}


def _clocked(now: Callable[[], datetime]) -> type[datetime]:
    """`datetime` whose `now()` is `now()`: what the verifying package reads as the time."""

    class Clocked(datetime):
        @classmethod
        def now(cls, tz: tzinfo | None = None) -> Any:
            instant = now()
            return instant.astimezone(tz) if tz is not None else instant.replace(tzinfo=None)

    return Clocked
