"""A target call is sent once per attempt: against a slow local endpoint that counts the Lambda
Invoke requests it receives, the client used for targets gives up after the run's budget
without sending again, and re-sends only what provably did not run (throttles)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ReadTimeoutError
from jobsched import aws
from jobsched.domain.errors import AmbiguousError, PermanentError, RetryableError
from jobsched.domain.grants import Grants, GrantsDocument
from jobsched.domain.models import LambdaTarget
from jobsched.settings import settings
from jobsched.targets import HttpTargetClient, Invocation, TargetAuthority, TargetRunner

FUNCTION = "arn:aws:lambda:us-east-1:123456789012:function:jobsched-target-slow"
INVOKE_PATH = "/2015-03-31/functions/"


class SlowLambda:
    """Answers Lambda Invoke after `delay` seconds; the first `throttle` requests get a 429,
    and `status` other than 200 answers with that service error."""

    def __init__(self) -> None:
        self.delay = 0.0
        self.throttle = 0
        self.status = 200
        self.invokes = 0
        self.finished = 0
        self.lock = threading.Lock()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if not self.path.startswith(INVOKE_PATH):
                    self.send_error(404)
                    return
                with owner.lock:
                    owner.invokes += 1
                    number = owner.invokes
                if number <= owner.throttle:
                    self._answer(429, "TooManyRequestsException", {"message": "Rate exceeded"})
                    return
                time.sleep(owner.delay)
                try:
                    if owner.status != 200:
                        self._answer(owner.status, "ServiceException", {"message": "boom"})
                    else:
                        self._answer(200, None, {"ok": True, "invoke": number})
                except OSError:
                    pass  # the client gave up (read timeout): nobody is listening any more
                finally:
                    with owner.lock:
                        owner.finished += 1

            def _answer(self, status: int, error: str | None, body: dict[str, Any]) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.send_header("x-amzn-RequestId", "r-1")
                if error:
                    self.send_header("x-amzn-ErrorType", error)
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *_: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def settle(self, expected: int, within: float = 5.0) -> None:
        """Wait until `expected` requests have finished server-side (so no retry is still due)."""
        deadline = time.monotonic() + within
        while time.monotonic() < deadline and self.finished < expected:
            time.sleep(0.05)
        time.sleep(0.3)  # a retry, if any, would arrive now


@pytest.fixture
def slow(monkeypatch: pytest.MonkeyPatch) -> Iterator[SlowLambda]:
    endpoint = SlowLambda()
    thread = threading.Thread(target=endpoint.server.serve_forever, daemon=True)
    thread.start()
    monkeypatch.setenv("JOBSCHED_AWS_ENDPOINT_URL", endpoint.url)
    settings.cache_clear()
    try:
        yield endpoint
    finally:
        endpoint.server.shutdown()
        endpoint.server.server_close()
        settings.cache_clear()


def invocation(timeout: float) -> Invocation:
    return Invocation(
        run_key="j_slow@2026-11-02T09:00:00Z",
        job_id="j_slow",
        tenant="tenant-a",
        job_type="report.build",
        scheduled_for=datetime(2026, 11, 2, 9, 0, tzinfo=UTC),
        attempt=1,
        payload={},
        timeout_seconds=timeout,
    )


def runner() -> TargetRunner:
    """As the worker is wired: the process's client factory, jobsched.aws.client; the tenant
    is granted the slow function."""
    granted = Grants(GrantsDocument.from_maps({"tenant-a": [FUNCTION]}))
    return TargetRunner(aws.client, http=HttpTargetClient(), authority=TargetAuthority(lambda: granted))


TARGET = LambdaTarget(kind="lambda", function_arn=FUNCTION)


def test_a_target_slower_than_its_budget_is_invoked_once_and_the_attempt_is_ambiguous(slow):
    slow.delay = 2.5
    started = time.monotonic()
    with pytest.raises(AmbiguousError) as caught:
        runner().run(TARGET, invocation(timeout=1))
    assert time.monotonic() - started < 2.0  # gave up after the 1 s budget, not the 10 s default
    assert caught.value.error_class == "ReadTimeoutError"
    slow.settle(1)
    assert slow.invokes == 1  # the run's retry policy decides about a second attempt


def test_a_target_within_its_budget_answers_after_one_invoke(slow):
    slow.delay = 1.5
    assert runner().run(TARGET, invocation(timeout=3)) == {"ok": True, "invoke": 1}
    slow.settle(1)
    assert slow.invokes == 1


def test_throttled_invokes_are_sent_again_since_they_never_ran(slow):
    slow.throttle = 2
    assert runner().run(TARGET, invocation(timeout=5)) == {"ok": True, "invoke": 3}
    assert slow.invokes == 3


def test_throttling_that_outlasts_the_retries_is_a_retryable_failure(slow):
    slow.throttle = 10
    with pytest.raises(RetryableError) as caught:
        runner().run(TARGET, invocation(timeout=5))
    assert not isinstance(caught.value, AmbiguousError | PermanentError)
    assert slow.invokes == aws.EFFECT_MAX_ATTEMPTS


def test_a_server_error_is_not_sent_again_since_the_target_may_have_run(slow):
    slow.status = 500
    with pytest.raises(RetryableError):
        runner().run(TARGET, invocation(timeout=5))
    slow.settle(1)
    assert slow.invokes == 1


def test_the_shared_client_would_send_a_timed_out_invoke_again(slow):
    """Why targets have their own client: botocore's standard mode retries read timeouts
    (`max_attempts` counts retries: the shared config's 5 send a slow invoke six times)."""
    slow.delay = 1.0
    shared = boto3.client(
        "lambda",
        endpoint_url=slow.url,
        config=Config(retries={"mode": "standard", "max_attempts": 3}, read_timeout=0.3),
    )
    with pytest.raises(ReadTimeoutError):
        shared.invoke(FunctionName=FUNCTION, Payload=b"{}")
    assert slow.invokes == 1 + 3


def test_effect_clients_are_cached_per_service_and_timeout_bucket(slow):
    assert [aws.timeout_bucket(s) for s in (0.2, 1, 4.5, 10, 10.1, 12, 15, 299.5, 5000)] == [
        1,
        1,
        5,
        10,
        15,
        15,
        15,
        300,
        aws.MAX_EFFECT_TIMEOUT,
    ]
    first = aws.effect_client("lambda", 12)
    assert aws.effect_client("lambda", 14.2) is first
    assert aws.effect_client("lambda", 16) is not first
    assert aws.effect_client("sqs", 12) is not first
    assert first.meta.config.read_timeout == 15
    assert first.meta.config.retries["total_max_attempts"] == 1
