"""The external-worker SDK against a fake lease API: outcomes reported under the claim's
fence, a lost lease never reported, the concurrency bound held, stop() waiting for the
handlers under way."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from jobsched.client import Client, HeartbeatView, LeaseView, RunView
from jobsched.worker import Lease, LeaseClient, LeaseLost, LeaseWorker, Permanent


class Refused(Exception):
    def __init__(self, status: int) -> None:
        super().__init__(f"HTTP {status}")
        self.status = status


class FakeApi:
    """Hands out `leases` once each, as the lease API answers them (`jobsched.client.Client`'s
    views); records heartbeats and completions, and whether each was sent as idempotent."""

    def __init__(self, leases: list[dict[str, Any]], *, heartbeat_status: int | None = None) -> None:
        self.waiting = list(leases)
        self.heartbeat_status = heartbeat_status
        self.heartbeats: list[tuple[str, int]] = []
        self.completions: list[dict[str, Any]] = []
        self.claims: list[int] = []
        self.idempotent: set[tuple[str, bool]] = set()  # (call, idempotent) as sent
        self.lock = threading.Lock()

    def claim(self, types, worker_id, *, max_runs=1, lease_seconds=60) -> list[LeaseView]:
        with self.lock:
            self.claims.append(max_runs)
            taken, self.waiting = self.waiting[:max_runs], self.waiting[max_runs:]
            return [LeaseView.model_validate(answer) for answer in taken]

    def heartbeat(self, run_key, fence, *, lease_seconds=60, idempotent=False) -> HeartbeatView:
        self.heartbeats.append((run_key, fence))
        self.idempotent.add(("heartbeat", idempotent))
        if self.heartbeat_status is not None:
            raise Refused(self.heartbeat_status)
        return HeartbeatView(run_key=run_key, fence=fence, lease_expires_at=EXPIRES)

    def complete(self, run_key, fence, outcome, *, result=None, error=None, idempotent=False) -> RunView:
        with self.lock:
            self.idempotent.add(("complete", idempotent))
            self.completions.append(
                {"runKey": run_key, "fence": fence, "outcome": outcome, "result": result, "error": error}
            )
        return ended_run(run_key, fence, outcome, result)


EXPIRES = "2026-12-03T02:01:00Z"


def lease(n: int, job_type: str = "t", fence: int = 3) -> dict[str, Any]:
    """A lease as `POST /v1/leases` answers it, every member present."""
    return {
        "runKey": f"j_x@2026-12-03T02:00:0{n}Z",
        "jobId": "j_x",
        "type": job_type,
        "scheduledFor": f"2026-12-03T02:00:0{n}Z",
        "attempt": 1,
        "fence": fence,
        "leaseExpiresAt": EXPIRES,
        "payload": {"n": n},
    }


def ended_run(run_key: str, fence: int, outcome: str, result: Any) -> RunView:
    """The run as a completion's answer shows it."""
    scheduled = run_key.split("@", 1)[1]
    return RunView.model_validate(
        {
            "runKey": run_key,
            "jobId": "j_x",
            "state": "SUCCEEDED" if outcome == "succeeded" else "RETRY_WAIT",
            "trigger": "schedule",
            "scheduledFor": scheduled,
            "dueAt": scheduled,
            "attempt": 1,
            "fence": fence,
            "redrives": 0,
            "definitionVersion": 1,
            "priority": "default",
            "reason": None,
            "lastErrorClass": None,
            "lastErrorMessage": None,
            "result": result,
            "createdAt": scheduled,
            "updatedAt": EXPIRES,
            "finishedAt": EXPIRES if outcome == "succeeded" else None,
            "leaseExpiresAt": None,
            "skippedThrough": None,
            "skippedCount": None,
            "blockedBy": None,
            "waitingFor": None,
        }
    )


def test_the_client_is_a_lease_client():
    client: LeaseClient = Client("http://127.0.0.1:9", api_key="k")  # mypy checks the protocol
    assert LeaseWorker(client, "w").client is client


def run_until(worker: LeaseWorker, api: FakeApi, done: int, timeout: float = 10.0) -> None:
    thread = threading.Thread(target=worker.run, kwargs={"install_signals": False})
    thread.start()
    deadline = time.monotonic() + timeout
    while len(api.completions) < done and time.monotonic() < deadline:
        time.sleep(0.01)
    worker.stop()
    thread.join(timeout)
    assert not thread.is_alive()


def test_each_outcome_is_reported_under_the_claims_fence():
    api = FakeApi([lease(1, "ok"), lease(2, "bad"), lease(3, "flaky")])
    worker = LeaseWorker(api, "w", concurrency=3, poll_seconds=0.01)

    @worker.handler("ok")
    def ok(run: Lease) -> Any:
        return {"got": run.payload["n"], "fence": run.fence}

    @worker.handler("bad")
    def bad(run: Lease) -> Any:
        raise Permanent("no such invoice", error_class="UnknownInvoice")

    @worker.handler("flaky")
    def flaky(run: Lease) -> Any:
        raise TimeoutError("upstream slow")

    run_until(worker, api, 3)
    by_key = {c["runKey"]: c for c in api.completions}
    assert by_key[lease(1)["runKey"]] == {
        "runKey": lease(1)["runKey"],
        "fence": 3,
        "outcome": "succeeded",
        "result": {"got": 1, "fence": 3},
        "error": None,
    }
    assert by_key[lease(2)["runKey"]]["error"] == {
        "class": "UnknownInvoice",
        "message": "no such invoice",
        "retryable": False,
    }
    assert by_key[lease(3)["runKey"]]["error"] == {
        "class": "TimeoutError",
        "message": "upstream slow",
        "retryable": True,
    }
    assert sorted(worker.completed) == sorted((c["runKey"], 3, c["outcome"]) for c in api.completions)
    # A completion under the claim's fence may be repeated by the client (see LeaseClient).
    assert api.idempotent == {("complete", True)}


def test_heartbeats_are_sent_as_safe_to_repeat():
    api = FakeApi([lease(1)])
    worker = LeaseWorker(api, "w", concurrency=1, lease_seconds=10, poll_seconds=0.01)
    worker.lease_seconds = 0.03  # type: ignore[assignment]  # beats every 10 ms: the test's pace

    @worker.handler("t")
    def slow(run: Lease) -> Any:
        deadline = time.monotonic() + 5
        while len(api.heartbeats) < 3 and time.monotonic() < deadline:
            run.check()
            time.sleep(0.005)
        return "done"

    run_until(worker, api, 1)
    assert len(api.heartbeats) >= 3 and api.completions[0]["outcome"] == "succeeded"
    assert api.idempotent == {("heartbeat", True), ("complete", True)}


def test_a_heartbeat_still_waiting_when_the_lease_runs_out_loses_it():
    """The client may be retrying a heartbeat (or waiting out a Retry-After): the lease's own
    clock keeps running, and the handler learns it lost the lease when it runs out."""
    answer = threading.Event()

    class Hanging(FakeApi):
        def heartbeat(self, run_key, fence, *, lease_seconds=60, idempotent=False) -> HeartbeatView:
            self.heartbeats.append((run_key, fence))
            answer.wait(10)
            raise Refused(503)

    api = Hanging([lease(1)])
    worker = LeaseWorker(api, "w", concurrency=1, lease_seconds=10, poll_seconds=0.01)
    worker.lease_seconds = 0.06  # type: ignore[assignment]
    seen: list[bool] = []

    @worker.handler("t")
    def slow(run: Lease) -> Any:
        seen.append(run.lost.wait(5))
        run.check()

    thread = threading.Thread(target=worker.run, kwargs={"install_signals": False})
    thread.start()
    deadline = time.monotonic() + 5
    while not seen and time.monotonic() < deadline:
        time.sleep(0.01)
    worker.stop()
    thread.join(5)
    answer.set()
    assert seen == [True] and api.heartbeats == [(lease(1)["runKey"], 3)] and api.completions == []


@pytest.mark.parametrize("finishes", ["inside the lease", "past the lease by the worker's clock"])
def test_a_handler_that_finishes_while_a_renewal_is_unanswered_is_reported(finishes):
    """A renewal hangs (the client retrying a 503, or waiting out a Retry-After) while the
    handler finishes: its answer is reported at once, under the claim's fence, and the API's
    fence check decides. Withheld, the lease would run out on the API too and the run's
    effect would run again. Past the lease by the worker's own clock the handler was told
    (`lost`), but its effect is done: reporting it is what keeps it from running twice."""
    answer = threading.Event()

    class Hanging(FakeApi):
        def heartbeat(self, run_key, fence, *, lease_seconds=60, idempotent=False) -> HeartbeatView:
            self.heartbeats.append((run_key, fence))
            answer.wait(10)
            raise Refused(503)

    api = Hanging([lease(1)])
    worker = LeaseWorker(api, "w", concurrency=1, lease_seconds=10, poll_seconds=0.01)
    worker.lease_seconds = 0.6  # type: ignore[assignment]  # a renewal is sent after 0.2 s
    finished = threading.Event()

    @worker.handler("t")
    def effect(run: Lease) -> Any:
        while not api.heartbeats:  # the renewal is under way
            time.sleep(0.005)
        if finishes != "inside the lease":
            run.lost.wait(5)  # the worker's own clock ran out meanwhile
        finished.set()
        return {"done": True}

    thread = threading.Thread(target=worker.run, kwargs={"install_signals": False})
    thread.start()
    assert finished.wait(5)
    deadline = time.monotonic() + 5
    while not api.completions and time.monotonic() < deadline:
        time.sleep(0.01)
    worker.stop()
    thread.join(5)
    answer.set()
    assert [(c["fence"], c["outcome"]) for c in api.completions] == [(3, "succeeded")]


def test_a_refused_heartbeat_stops_the_handler_and_nothing_is_reported():
    api = FakeApi([lease(1)], heartbeat_status=409)
    worker = LeaseWorker(api, "w", concurrency=1, lease_seconds=10, poll_seconds=0.01)
    worker.lease_seconds = 0.03  # type: ignore[assignment]  # beats every 10 ms: the test's pace
    stopped = threading.Event()

    @worker.handler("t")
    def slow(run: Lease) -> Any:
        while True:
            try:
                run.check()
            except LeaseLost:
                stopped.set()
                raise
            time.sleep(0.005)

    thread = threading.Thread(target=worker.run, kwargs={"install_signals": False})
    thread.start()
    assert stopped.wait(5)
    worker.stop()
    thread.join(5)
    assert api.heartbeats and api.completions == [] and worker.completed == []


def test_an_unreachable_api_loses_the_lease_once_it_has_run_out():
    api = FakeApi([lease(1)], heartbeat_status=503)
    worker = LeaseWorker(api, "w", concurrency=1, lease_seconds=10, poll_seconds=0.01)
    worker.lease_seconds = 0.06  # type: ignore[assignment]
    seen: list[bool] = []

    @worker.handler("t")
    def slow(run: Lease) -> Any:
        seen.append(run.lost.wait(5))
        run.check()

    thread = threading.Thread(target=worker.run, kwargs={"install_signals": False})
    thread.start()
    deadline = time.monotonic() + 5
    while not seen and time.monotonic() < deadline:
        time.sleep(0.01)
    worker.stop()
    thread.join(5)
    # 503s are tried again until the lease has run out by the worker's own clock.
    assert seen == [True] and len(api.heartbeats) >= 2 and api.completions == []


def test_never_more_runs_under_way_than_the_concurrency():
    api = FakeApi([lease(n) for n in range(8)])
    worker = LeaseWorker(api, "w", concurrency=3, poll_seconds=0.01)
    under_way, most = [0], [0]
    lock = threading.Lock()

    @worker.handler("t")
    def work(run: Lease) -> Any:
        with lock:
            under_way[0] += 1
            most[0] = max(most[0], under_way[0])
        time.sleep(0.02)
        with lock:
            under_way[0] -= 1

    run_until(worker, api, 8)
    assert len(api.completions) == 8 and most[0] <= 3 and max(api.claims) <= 3


def test_stop_lets_the_handlers_under_way_finish_and_leases_no_more():
    api = FakeApi([lease(1), lease(2)])
    worker = LeaseWorker(api, "w", concurrency=1, poll_seconds=0.01)
    started = threading.Event()

    @worker.handler("t")
    def work(run: Lease) -> Any:
        started.set()
        time.sleep(0.1)
        return "done"

    thread = threading.Thread(target=worker.run, kwargs={"install_signals": False})
    thread.start()
    assert started.wait(5)
    worker.stop()
    thread.join(5)
    assert [c["outcome"] for c in api.completions] == ["succeeded"]
    assert len(api.waiting) == 1  # the second was never leased


def test_bad_settings_are_refused():
    with pytest.raises(ValueError, match="lease_seconds"):
        LeaseWorker(FakeApi([]), "w", lease_seconds=5)
    worker = LeaseWorker(FakeApi([]), "w")
    with pytest.raises(ValueError, match="no handler"):
        worker.run(install_signals=False)
    worker.handler("t")(lambda run: None)
    with pytest.raises(ValueError, match="already registered"):
        worker.handler("t")(lambda run: None)


def test_more_types_than_one_claim_takes_are_asked_for_in_turn():
    leases = [lease(n, f"type-{n:02}") for n in range(10)] + [
        {**lease(9, "type-11"), "runKey": "j_x@2026-12-03T02:00:11Z"}
    ]
    asked: list[list[str]] = []

    class Typed(FakeApi):
        def claim(self, types, worker_id, *, max_runs=1, lease_seconds=60):
            asked.append(list(types))
            with self.lock:
                taken = [lease for lease in self.waiting if lease["type"] in types][:max_runs]
                self.waiting = [lease for lease in self.waiting if lease not in taken]
                return [LeaseView.model_validate(answer) for answer in taken]

    api = Typed(leases)
    worker = LeaseWorker(api, "w", concurrency=2, poll_seconds=0.01)
    for n in range(12):
        worker.handler(f"type-{n:02}")(lambda run: "ok")
    run_until(worker, api, 11)
    assert len(api.completions) == 11
    assert all(len(types) <= 10 for types in asked) and any("type-11" in types for types in asked)
