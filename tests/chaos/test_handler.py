"""Chaos drives what production runs: the worker Lambda's handler (its concurrent batch
processor) on the SQS events Lambda builds, and HTTP targets through the harness's receiver,
which records every delivery in the effect ledger and verifies its Standard Webhooks
signature."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from unittest import mock

import pytest
from jobsched import wiring
from jobsched.domain.errors import PermanentError, RetryableError
from jobsched.domain.instants import ManualClock
from jobsched.domain.models import HttpTarget
from jobsched.domain.signing import SigningSecrets
from jobsched.handlers import worker as worker_handler
from jobsched.targets import DestinationPolicy, HttpTargetClient, Invocation
from jobsched.targets.signing import DeliverySigner

from chaos import MUST_BE_ZERO, ChaosConfig, FaultRates, run_chaos
from chaos.invocation import acknowledged, sqs_event
from chaos.ledger import HTTP, OK, WEBHOOK, Ledger, Sequencer
from chaos.receiver import ALLOW, Receiver
from chaos.scenario import Mix

from .known_defects import PIPELINE_DEFECTS

T0 = datetime(2026, 10, 25, 0, 50, tzinfo=UTC)


@pytest.fixture
def receiver():
    clock = ManualClock(T0)
    ledger = Ledger(Sequencer(), clock.now)
    with Receiver(ledger, clock.now, seed=1).running() as running:
        yield running, ledger, clock


def client(secrets: dict[str, SigningSecrets], clock: ManualClock) -> HttpTargetClient:
    """The production client as the chaos worker builds it."""
    return HttpTargetClient(DestinationPolicy([ALLOW]), signer=DeliverySigner(secrets.get, clock))


def invocation(n: int, attempt: int = 1) -> Invocation:
    return Invocation(
        run_key=f"j_{n}@2026-10-25T00:50:00Z",
        job_id=f"j_{n}",
        tenant="acme",
        job_type=HTTP,
        scheduled_for=T0,
        attempt=attempt,
        payload={"n": n},
        timeout_seconds=10,
    )


def test_the_receiver_records_each_signed_delivery_and_answers_like_a_downstream(receiver):
    running, ledger, clock = receiver
    target = HttpTarget(kind="http", url=running.url)
    secrets = {f"j_{n}": SigningSecrets.first(f"j_{n}", "acme", T0) for n in range(60)}
    for job_id, signing in secrets.items():
        running.trust(job_id, signing.current or "")
    sender = client(secrets, clock)
    outcomes: Counter[str] = Counter()
    for n in range(60):
        try:
            answer = sender.send(target, invocation(n))
            assert answer["body"] == {"received": invocation(n).run_key, "attempt": 1}
            outcomes["ok"] += 1
        except RetryableError as exc:
            assert exc.error_class == "HTTP503"
            outcomes["retryable"] += 1
        except PermanentError as exc:
            assert exc.error_class == "HTTP400"  # chaos.checker.PERMANENT: ends the series
            outcomes["permanent"] += 1
    assert set(outcomes) == {"ok", "retryable", "permanent"}, outcomes
    assert running.rejected == []
    calls = ledger.all_calls()
    assert len(calls) == 60 and all(c.finished and c.source == WEBHOOK and c.tenant == "acme" for c in calls)
    assert sum(c.acted for c in calls) == outcomes["ok"]
    # The answer is the seed's, the run key's and the attempt's: a repeat gets the same one.
    again: Counter[str] = Counter()
    for n in range(60):
        try:
            sender.send(target, invocation(n))
            again["ok"] += 1
        except (RetryableError, PermanentError):
            pass
    assert again["ok"] == outcomes["ok"]
    assert max(len(calls) for calls in ledger.calls.values()) == 2  # each delivery is an effect


def test_the_receiver_refuses_a_delivery_it_cannot_verify(receiver):
    running, ledger, clock = receiver
    target = HttpTarget(kind="http", url=running.url)
    signing = SigningSecrets.first("j_1", "acme", T0)
    running.trust("j_1", SigningSecrets.first("j_1", "acme", T0).current or "")  # another secret
    with pytest.raises(PermanentError, match="401"):
        client({"j_1": signing}, clock).send(target, invocation(1))
    with pytest.raises(PermanentError, match="401"):
        client({}, clock).send(target, invocation(2))  # unsigned, and no secret known
    running.trust("j_3", signing.current or "")
    late = ManualClock(T0 - timedelta(minutes=6))  # signed six minutes before the receiver's now
    with pytest.raises(PermanentError, match="401"):
        client({"j_3": signing.model_copy(update={"job_id": "j_3"})}, late).send(target, invocation(3))
    assert [problem.split(": ", 1)[1].split(":")[0] for problem in running.rejected] == [
        "signature rejected",
        "webhook-id None is not the run key and attempt",
        "signature rejected",
    ]
    assert not any(call.acted for call in ledger.all_calls()) and len(ledger.all_calls()) == 3


def test_lambda_deletes_every_record_the_handler_did_not_report_failed():
    messages = [
        {"MessageId": f"m{i}", "ReceiptHandle": f"r{i}", "Body": "{}", "Attributes": {"SentTimestamp": "1"}}
        for i in range(3)
    ]
    event = sqs_event("https://sqs.us-east-1.amazonaws.com/123456789012/jobsched-high", messages)
    record = event["Records"][0]
    assert record["eventSourceARN"] == "arn:aws:sqs:us-east-1:123456789012:jobsched-high"
    assert record["attributes"] == {"SentTimestamp": "1"} and record["receiptHandle"] == "r0"
    left = acknowledged(event, {"batchItemFailures": [{"itemIdentifier": "m1"}]})
    assert [r["messageId"] for r in left] == ["m0", "m2"]


@pytest.mark.integration
@pytest.mark.timeout(600)
def test_a_chaos_run_invokes_the_worker_handler_and_its_webhooks_reach_the_receiver():
    before = wiring._container
    events: list[dict] = []
    real = worker_handler.handler

    def spy(event, context):
        events.append(event)
        assert wiring.container().worker is not None  # the chaos container, for this invocation
        return real(event, context)

    faults = replace(FaultRates(), freeze_worker=0.05, crash_before_completion=0.05)
    config = ChaosConfig(
        seed=4,
        runs=40,
        window_seconds=120,
        faults=faults,
        hog=False,
        mix=Mix(types=((OK, 1), (HTTP, 2)), max_attempts=(2, 4)),
    )
    with mock.patch.object(worker_handler, "handler", spy):
        report = run_chaos(config, out=lambda line: None)
    figures = report.figures
    detail = "\n".join([figures.line(), *map(str, figures.violations[:20]), *report.unexpected])
    assert report.settled and not report.unexpected, detail
    for name in MUST_BE_ZERO:
        if name not in PIPELINE_DEFECTS:
            assert getattr(figures, name) == 0, f"{name}\n{detail}"
    assert wiring._container is before  # the chaos container is gone with its run
    assert events and max(len(e["Records"]) for e in events) > 1  # batches, not single records
    assert all(r["eventSourceARN"].startswith("arn:aws:sqs:") for e in events for r in e["Records"])
    assert report.faults["webhooks_answered_200"] > 10, report.faults
    assert report.faults["webhooks_answered_503"] > 0, report.faults
    assert report.outcomes["succeeded"] > 0
