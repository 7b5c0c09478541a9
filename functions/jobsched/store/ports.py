"""The run store as the services use it: ports whose docstrings are the contract every
adapter keeps. Two adapters keep it — store.runs.RunStore (the Runs table in DynamoDB) and
store.memory_runs.InMemoryRunStore (items in a dict under a lock, for tests) — and
tests/contract/test_run_store_contract.py runs one suite against both.

What holds for every method:

- A run is stored as `RunStore.to_item` encodes it and read back as `RunStore.from_item`
  decodes it: what the store does not keep (the target and payload of a run that references
  its job's definition) reads back as None, and the history entries a write adds carry the
  writing invocation's trace id (`RunStore.stamped`).
- Reads are consistent unless a method says otherwise: a write that has returned is seen by
  every later read and listing.
- Every write is conditional: `insert` on its key being free, the others on the run as the
  caller read it (its `rev`; but for `move_check` its state; for a lease holder its fence);
  a refused write changes nothing.
- Absent is not an error: a read of a run that is not stored returns None (or leaves it out);
  no method raises NotFound (the services decide what absent means).
- StorageUnavailable (503) when the store throttles or cannot be reached after its own
  retries: the call may be made again. A write so refused may still have landed; made again
  from the same read, it then meets RunChanged, whose `current` shows it (`written_as`).
- Runs are indexed by what they hold, as `RunStore.to_item` says; an index entry exists
  exactly while the run holds its key attributes, and every write of the whole run (`insert`,
  `commit`, `replace`) sets or removes them from the run as written:
  - open (`overdue_keys`): while `domain.repair.check_at(run, timings, waits_for_lease=...)`
    is not None (open runs, and runs watched for lateness), in shard `open_shard_of(job_id)`,
    at that instant; `move_check` moves the entry, `extend_lease` leaves it where it is.
  - claimable (`claimable`): while the run is PENDING, QUEUED or RETRY_WAIT, not blocked,
    and `waits_for_lease(run)`, under its tenant and type, at its `due_at`.
  - dead (`list_dead`): while the run is DEAD, under its tenant, at its `finished_at`
    (else `updated_at`).
  - the tenant's runs (`list_for_tenant`): every run, in its lane at its order
    (domain.run_listing), from its creation; neither ever changes.
- No expiry: a finished run's `expires_at` (its retention) is the table's TTL in DynamoDB,
  which deletes it some time after; until then, and always in memory, it is read as stored.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any, Protocol

from ..domain.repair import RepairTimings
from ..domain.run_listing import RunFilter
from ..domain.runs import Run
from .dynamo import Parsed
from .runs import RunPage, RunsView, SummaryPage


class RunWrites(Protocol):
    """Creating runs and changing them under the conditions that keep writers apart."""

    def insert(self, run: Run) -> bool:
        """Create `run` (as `stamped(run, None)`, at its own `rev`) unless a run holds its key.

        Returns True when written; False when the key is taken, by whatever run (an identical
        one, a twin's, another state): nothing is written then and the stored run is left as
        it is."""
        ...

    def commit(self, read: Run, change: Callable[[Run], Run], *, holder: bool | None = None) -> Run:
        """Write `change(read)` if the stored run is still in `read`'s state at `read`'s rev.

        `holder`: the write is the lease holder's (None: the transition's row says, through
        domain.transitions.applied_rule on the changed run). A holder's write also requires
        `read`'s fence; when only the rev moved since `read` (a heartbeat, the holder's own
        bookkeeping), `change` is applied again to the run as stored and that is written,
        at most store.runs.HOLDER_RETRIES times.

        Returns the run as written: `change(read)` (or the re-applied change) stamped, at
        rev + 1 of the run it was written over. A refusal whose stored item is exactly the
        one this write would make, for a holder's write or a claim, is taken as this write
        having landed (a request sent again) and returns it.

        Raises RunChanged with `current`, the run as stored now (None when absent), when the
        stored state or fence is not `read`'s, or, for a write that is not a holder's, when
        anything wrote the run since `read`; RunChanged "keeps changing" after the retries;
        whatever `change` raises (TransitionRefused when the transition does not start from
        `read`), with nothing written."""
        ...

    def replace(self, run: Run) -> Run:
        """Write `run` (bookkeeping, its state unchanged) if the stored run is still at
        `run.rev` and in `run.state`. Returns it as written (stamped, rev + 1).

        Raises RunChanged with the stored run (None when absent) otherwise; never re-applied."""
        ...

    def extend_lease(self, run: Run, until: datetime, *, live_at: datetime | None = None) -> Run:
        """Heartbeat: set the lease of `run` (LEASED, read by its holder) to end at `until`,
        while the stored run is LEASED under `run`'s fence. The stored run changes in its
        lease and rev alone: no history is added, and its open-index entry stays where it was
        (earlier than the new lease's deadline: the reconciler moves it when it gets there).

        `live_at` (the holder's clock now): a lease that has expired by then is not extended.
        A run holding a tenant slot (`run.tenant_slot`) must be extended with it.

        Returns `heartbeat(run)` (or of the stored run, when only the rev moved since `run`)
        at the stored rev + 1. Raises RunChanged with the stored run: "lease lost" when it is
        absent, not LEASED or under another fence; "lease expired" when its lease has ended
        at `live_at`; ValueError for a run holding a slot without `live_at`."""
        ...

    def move_check(self, run: Run, to: datetime) -> bool:
        """Move the run's open-index entry to `to`, if the stored run is still at `run.rev`
        and has an entry. The rev is left alone (the lease holder's next write must not fail
        on it), as is everything else.

        Returns False, writing nothing, when the run changed since `run`, is absent, or has
        no entry (its writer set the entry anew, or it left the index)."""
        ...

    def written_as(self, stored: Run | None, written: Run) -> bool:
        """Whether `stored` (as read back) is, stored, item for item what writing `written`
        (the caller's, unstamped) stored: a refused write whose target already holds what it
        would have written. Trace ids are left out of the comparison. No store access."""
        ...


class RunReads(Protocol):
    """Reading runs by key and a job's runs by occurrence, consistently."""

    def get_by_key(self, run_key: str) -> Run | None:
        """The run at `run_key`, any RFC 3339 spelling of its instant; None when absent or
        when the key is malformed."""
        ...

    def read_keys(self, keys: list[dict[str, Any]]) -> Parsed[Run]:
        """The runs at `keys` (index entries: `{"job_id": {"S": ...}, "sk": {"S": ...}}` in
        DynamoDB's attribute form, as `overdue_keys` returns them), read consistently, in the
        order given, a key given twice read twice; keys with no run are left out, and items
        that do not parse are left out and named in `unreadable` (their run keys)."""
        ...

    def scheduled_between(self, job_id: str, start: datetime, end: datetime, *, limit: int) -> list[Run]:
        """The job's runs with start <= scheduled_for < end (whole seconds; manual runs
        included), oldest first (by instant, then key), at most `limit` of them."""
        ...

    def occurrences_held(
        self, job_id: str, start: datetime, end: datetime, *, max_pages: int = 20
    ) -> tuple[list[tuple[datetime, datetime]], bool]:
        """What the job's stored scheduled and backfill runs with start <= scheduled_for <=
        end hold, oldest first, as (first, last occurrence) spans: a run its own instant, a
        SKIPPED range record up to its `skipped_through`, an item whose document does not
        parse its own instant. Manual runs hold none.

        The flag says whether the read reached `end` (an adapter that reads in pages stops
        after `max_pages`, with False); when False, the spans cover a prefix of the range."""
        ...

    def runs_after(
        self, job_id: str, after: datetime | None, until: datetime, *, max_pages: int = 10
    ) -> tuple[list[Run], bool]:
        """The job's runs scheduled after `after` (None: all of them) and at or before `until`
        (whole seconds: manual runs of `until`'s second included), in key order (by instant;
        a scheduled run before the manual ones of its second), read consistently. The flag
        says whether the read reached `until` (an adapter that reads in pages stops after
        `max_pages`, with False); when False, the runs are a prefix."""
        ...

    def get_many(self, run_keys: list[str]) -> list[Run]:
        """The runs at `run_keys` that exist and parse, read consistently, in the order given;
        malformed keys and absent runs are left out."""
        ...

    def latest_ran_before(
        self, run: Run, *, page_size: int = 100, max_pages: int = 40
    ) -> tuple[Run | None, bool]:
        """The job's latest scheduled run (trigger `schedule`) before `run`'s occurrence that
        is not SKIPPED, or is SKIPPED behind a live run (`overlapped_by`): where the overlap
        walk (domain.overlap) back from `run` stops. Manual and backfill runs are passed over.

        The flag says whether the read got an answer: (run, True), or (None, True) at the
        start of the job's runs; (None, False) when an adapter that reads in pages gave up
        after `max_pages` of `page_size`."""
        ...


class RunListings(Protocol):
    """The pages the API lists runs in. Cursors are opaque and bound to what they page: a
    cursor from another listing, scope or filter is refused with ValidationFailed naming
    `cursor` (400). None as the next cursor means the listing is read out; a cursor may also
    come with the last page (the page after it is then empty). Pages never repeat a run, and
    following the cursors to the end lists each run that stays put exactly once."""

    def list_for_job(
        self,
        job_id: str,
        *,
        limit: int,
        cursor: str | None,
        view: RunsView = "all",
        now: datetime | None = None,
    ) -> RunPage:
        """One page of at most `limit` of the job's runs: `all` newest scheduled first,
        `history` those scheduled at or before `now` newest first, `upcoming` those after
        `now` soonest first (one instant's runs by run key, in the view's direction: its
        manual runs above its scheduled one).

        A cursor resumes after its own run whatever `now` has become since. Raises
        ValueError for a split view without `now`; ValidationFailed for a cursor not of this
        job's runs."""
        ...

    def list_for_tenant(
        self,
        tenant: str,
        run_filter: RunFilter,
        *,
        limit: int,
        cursor: str | None,
        due_by: datetime | None = None,
    ) -> SummaryPage:
        """One page of the tenant's runs that `run_filter` keeps, as summaries, newest
        scheduled first (ties: by run key, highest first): across the tenant's jobs, or the
        filter's one job (another tenant's job lists nothing). Without `until`, runs
        scheduled after `due_by` (made ahead) are left out.

        A page holds at most `limit` runs, possibly fewer with a cursor all the same (a
        filter that keeps few of the runs read). Raises ValidationFailed for a cursor of
        another tenant or of other filters."""
        ...

    def list_dead(self, tenant: str, *, limit: int, cursor: str | None) -> RunPage:
        """One page of at most `limit` of the tenant's DEAD runs, the latest to die first
        (ties in any order, the same on every page). Raises ValidationFailed for a cursor
        not of this tenant's dead runs."""
        ...


class RunWorkLists(Protocol):
    """The sparse indexes the reconciler and external workers take their work from, and the
    timings the open index is kept by."""

    @property
    def timings(self) -> RepairTimings:
        """The repair timings the open index's instants are computed with (domain.repair)."""
        ...

    def waits_for_lease(self, run: Run) -> bool:
        """Whether `run` is for external workers (no target, a type no handler here runs):
        what puts a waiting run in the claimable index, and what its repair deadline takes."""
        ...

    def overdue_keys(
        self, shard: int, now: datetime, *, limit: int, cursor: dict[str, Any] | None = None
    ) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
        """One page of at most `limit` keys (`{"job_id": {"S": ...}, "sk": {"S": ...}}`) of
        the shard's runs whose open-index instant is at or before `now`, earliest first (ties
        in any order, the same on every page), and the cursor of the next page (None: read
        out). The runs are not read (`read_keys` reads them). In DynamoDB the index lags the
        table: a key may name a run that has moved on or is gone since."""
        ...

    def claimable(
        self,
        tenant: str,
        job_type: str,
        now: datetime,
        *,
        limit: int,
        cursor: dict[str, Any] | None = None,
    ) -> tuple[list[Run], dict[str, Any] | None]:
        """One page of the tenant's runs of `job_type` in the claimable index that are due by
        `now` (`due_at` <= now), earliest due first, read consistently, and the cursor of the
        next page (None: read out). At most `limit`; fewer when entries named runs that are
        no longer waiting (the index lags the table in DynamoDB): every run returned still
        waits to be claimed as read (though a `due_at` moved later since its entry was
        written may not be due yet)."""
        ...


class RunStorePort(RunWrites, RunReads, RunListings, RunWorkLists, Protocol):
    """The run store whole: what a service that writes and reads runs is given."""
