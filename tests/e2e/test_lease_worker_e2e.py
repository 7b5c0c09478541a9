"""The external-worker SDK (jobsched.worker.LeaseWorker) against the lease API over HTTP:
each outcome recorded on the run under the claim's fence, a retry taken by the next lease,
and a lease lost to a second worker while the first still runs: the first is stopped and
never reports, the run is completed once, by the later fence."""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from jobsched.client import ApiUnreachable, Client, HeartbeatView, LeaseView, RunView
from jobsched.worker import Lease, LeaseLost, LeaseWorker, Permanent
from jobsched_cli.client import ApiClient

from .helpers import finish, instant, unique, wait_for

pytestmark = [pytest.mark.e2e]


def job(client: ApiClient, job_type: str, **fields: Any) -> str:
    created = client.create_job({"name": unique("sdk"), "type": job_type, "runAt": instant(1), **fields})
    return str(created["jobId"])


def typed(client: ApiClient) -> Client:
    """The typed client a worker runs on, over the suite's connection (endpoint, key, SigV4)."""
    return Client.over(client)


def only_run(client: ApiClient, job_id: str) -> dict[str, Any]:
    runs = client.list_runs(job_id, limit=10, view="all")["items"]
    assert len(runs) == 1, runs
    return client.get_run(runs[0]["runKey"])


@pytest.fixture
def started() -> Iterator[list[tuple[LeaseWorker, threading.Thread]]]:
    workers: list[tuple[LeaseWorker, threading.Thread]] = []
    yield workers
    for worker, thread in workers:
        worker.stop()
        thread.join(60)


def start(workers: list[tuple[LeaseWorker, threading.Thread]], worker: LeaseWorker) -> None:
    thread = threading.Thread(target=worker.run, kwargs={"install_signals": False}, daemon=True)
    thread.start()
    workers.append((worker, thread))


def test_each_outcome_lands_on_the_run_under_its_fence(client_a: ApiClient, started):
    prefix = unique("sdk")
    ok_id = job(client_a, f"{prefix}.ok", payload={"n": 7})
    bad_id = job(client_a, f"{prefix}.bad")
    retry_id = job(client_a, f"{prefix}.retry", maxAttempts=2, retry={"baseSeconds": 1, "capSeconds": 1})
    worker = LeaseWorker(typed(client_a), "sdk-1", concurrency=3, poll_seconds=0.2)

    @worker.handler(f"{prefix}.ok")
    def ok(run: Lease) -> Any:
        return {"doubled": run.payload["n"] * 2, "fence": run.fence}

    @worker.handler(f"{prefix}.bad")
    def bad(run: Lease) -> Any:
        raise Permanent("no such invoice", error_class="UnknownInvoice")

    @worker.handler(f"{prefix}.retry")
    def retry(run: Lease) -> Any:
        if run.attempt == 1:
            raise ConnectionError("upstream reset")
        return {"attempt": run.attempt}

    def ended(job_id: str) -> bool:
        return only_run(client_a, job_id)["state"] in ("SUCCEEDED", "DEAD")

    start(started, worker)
    try:
        for job_id in (ok_id, bad_id, retry_id):
            wait_for(functools.partial(ended, job_id), what=f"{job_id} ended", timeout=60)
    finally:
        for job_id in (ok_id, bad_id, retry_id):
            finish(client_a, job_id)
    done = only_run(client_a, ok_id)
    assert done["state"] == "SUCCEEDED" and done["result"] == {"doubled": 14, "fence": done["fence"]}
    dead = only_run(client_a, bad_id)
    assert dead["state"] == "DEAD" and dead["lastErrorClass"] == "UnknownInvoice" and dead["attempt"] == 1
    retried = only_run(client_a, retry_id)
    assert retried["state"] == "SUCCEEDED" and retried["result"] == {"attempt": 2}
    assert [t["to"] for t in retried["transitions"]].count("RETRY_WAIT") == 1


class Partitioned:
    """The API as a worker cut off from it after its claim: heartbeats never arrive."""

    def __init__(self, client: ApiClient) -> None:
        self.client = typed(client)
        self.completions: list[tuple[str, int]] = []

    def claim(self, *args: Any, **kwargs: Any) -> list[LeaseView]:
        return self.client.claim(*args, **kwargs)

    def heartbeat(self, *args: Any, **kwargs: Any) -> HeartbeatView:
        raise ApiUnreachable("partitioned")

    def complete(self, run_key: str, fence: int, *args: Any, **kwargs: Any) -> RunView:
        self.completions.append((run_key, fence))
        return self.client.complete(run_key, fence, *args, **kwargs)


def test_a_lease_lost_to_a_second_worker_stops_the_first_and_the_run_completes_once(
    client_a: ApiClient, started
):
    job_type = unique("sdk") + ".steal"
    job_id = job(client_a, job_type, maxAttempts=3, retry={"baseSeconds": 1, "capSeconds": 1})
    cut_off = Partitioned(client_a)
    first = LeaseWorker(cut_off, "sdk-cut-off", concurrency=1, lease_seconds=10, poll_seconds=0.2)
    effects: list[tuple[str, int]] = []
    stopped = threading.Event()
    claimed = threading.Event()

    @first.handler(job_type)
    def slow(run: Lease) -> Any:
        claimed.set()
        while True:  # a long effect in steps, each checked against the lease
            try:
                run.check()
            except LeaseLost:
                stopped.set()
                raise
            time.sleep(0.1)

    start(started, first)
    try:
        assert claimed.wait(30), "the first worker never leased the run"
        first.stop()  # it leases nothing more; its handler goes on until the lease is lost
        second = LeaseWorker(typed(client_a), "sdk-2", concurrency=1, poll_seconds=0.2)

        @second.handler(job_type)
        def quick(run: Lease) -> Any:
            effects.append((run.run_key, run.fence))
            return {"by": "sdk-2", "fence": run.fence}

        start(started, second)
        run = wait_for(
            lambda: (r := only_run(client_a, job_id))["state"] == "SUCCEEDED" and r,
            what="the run completed by the second worker",
            timeout=90,
        )
        assert stopped.wait(30), "the cut-off worker never learnt it lost its lease"
    finally:
        finish(client_a, job_id)
    assert run["result"] == {"by": "sdk-2", "fence": run["fence"]} and run["fence"] >= 2
    assert effects == [(run["runKey"], run["fence"])]
    assert cut_off.completions == [] and first.completed == []


def test_an_at_most_once_run_whose_worker_is_cut_off_is_never_run_again(client_a: ApiClient, started):
    job_type = unique("sdk") + ".once"
    job_id = job(client_a, job_type, maxAttempts=3, delivery="at-most-once")
    cut_off = Partitioned(client_a)
    first = LeaseWorker(cut_off, "sdk-cut-off", concurrency=1, lease_seconds=10, poll_seconds=0.2)
    claimed = threading.Event()
    effects: list[int] = []

    @first.handler(job_type)
    def slow(run: Lease) -> Any:
        claimed.set()
        effects.append(run.fence)  # the effect began: at-most-once forbids a second
        while True:
            run.check()
            time.sleep(0.1)

    start(started, first)
    try:
        assert claimed.wait(30), "the first worker never leased the run"
        first.stop()
        second = LeaseWorker(typed(client_a), "sdk-2", concurrency=1, poll_seconds=0.2)

        @second.handler(job_type)
        def again(run: Lease) -> Any:
            effects.append(run.fence)
            return "twice"

        start(started, second)
        run = wait_for(
            lambda: (r := only_run(client_a, job_id))["state"] == "DEAD" and r,
            what="the at-most-once run dead after its lease expired",
            timeout=90,
        )
    finally:
        finish(client_a, job_id)
    assert run["lastErrorClass"] == "AtMostOnce" and effects == [1]
    assert cut_off.completions == []
