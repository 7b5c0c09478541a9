"""The billing team's external worker: sends the invoices its `invoice.send` jobs ask for,
writing each into its own database under the lease's fence.

    JOBSCHED_URL=https://….execute-api.eu-west-1.amazonaws.com/v1 python worker.py   # SigV4
    JOBSCHED_URL=http://127.0.0.1:8080 JOBSCHED_KEY=jobsched-dev-key python worker.py  # local mode

A worker that lost its lease (it stalled, another worker claimed the run again) must never
overwrite what the later claim wrote: every write carries the fence and is refused for a
smaller one. Fences are per run (each run's first claim is fence 1), so the fenced row is
keyed by the run too: a recurring job's next run for the same invoice writes a row of its
own, never compared with the last run's fence. Here the database is SQLite; with DynamoDB
the same rule is a key of (invoice, run key) and a `ConditionExpression` of
`attribute_not_exists(fence) OR fence < :fence`."""

from __future__ import annotations

import os
import sqlite3
import threading
from typing import Any

from jobsched.client import Client
from jobsched.worker import Lease, LeaseLost, LeaseWorker, Permanent

SCHEMA = (
    "CREATE TABLE IF NOT EXISTS invoices"
    " (id TEXT, run_key TEXT, status TEXT, fence INTEGER, PRIMARY KEY (id, run_key))"
)


class Invoices:
    """The team's own store: one row per invoice and run, written only under a newer fence of
    that run."""

    def __init__(self, path: str = ":memory:") -> None:
        self._db = sqlite3.connect(path, check_same_thread=False)
        self._lock = threading.Lock()
        with self._lock, self._db:
            self._db.execute(SCHEMA)

    def mark_sent(self, invoice_id: str, run_key: str, fence: int) -> bool:
        """Record the invoice as sent by run `run_key`'s attempt holding `fence`. False when a
        later claim of the same run (a larger fence) already wrote it: this attempt's lease was
        lost, and it writes nothing. Another run's row is never compared: fences are per run."""
        with self._lock, self._db:
            changed = self._db.execute(
                "INSERT INTO invoices (id, run_key, status, fence) VALUES (?, ?, 'sent', ?) "
                "ON CONFLICT (id, run_key) DO UPDATE SET status = 'sent', fence = excluded.fence "
                "WHERE invoices.fence < excluded.fence",
                (invoice_id, run_key, fence),
            ).rowcount
        return changed == 1

    def fence_of(self, invoice_id: str, run_key: str) -> int | None:
        """The fence run `run_key` last wrote invoice `invoice_id` under; None if it never did."""
        with self._lock:
            row = self._db.execute(
                "SELECT fence FROM invoices WHERE id = ? AND run_key = ?", (invoice_id, run_key)
            ).fetchone()
        return None if row is None else int(row[0])


def build(client: Client, invoices: Invoices, *, worker_id: str = "billing-1") -> LeaseWorker:
    """The worker with its one handler, over `client` and `invoices`."""
    worker = LeaseWorker(client, worker_id, concurrency=4)

    @worker.handler("invoice.send")
    def send(lease: Lease) -> dict[str, Any]:
        invoice_id = lease.payload.get("invoiceId") if isinstance(lease.payload, dict) else None
        if not isinstance(invoice_id, str):
            raise Permanent("the payload names no invoiceId", error_class="BadPayload")
        lease.check()  # raises LeaseLost once the lease is gone: no effect after that
        if not invoices.mark_sent(invoice_id, lease.run_key, lease.fence):
            raise LeaseLost(f"invoice {invoice_id} was written by {lease.run_key} under a later fence")
        return {"invoiceId": invoice_id, "fence": lease.fence}

    return worker


def main() -> None:
    endpoint = os.environ["JOBSCHED_URL"]
    key = os.environ.get("JOBSCHED_KEY")
    client = Client(endpoint, api_key=key) if key else Client(endpoint, sigv4=True)
    build(client, Invoices(os.environ.get("INVOICES_DB", "invoices.sqlite3"))).run()


if __name__ == "__main__":
    main()
