"""The run store's ports (store.ports) kept in memory, for tests of the services that need
no DynamoDB: the run items RunStore would write, in a dict under one lock.

What it shares with RunStore, so that the two cannot drift apart: the item encoding (an
item here is `RunStore.to_item`'s, read back with `RunStore.from_item`: the indexes'
attributes, the document, the trace ids), each write's condition (`PreparedPut.admits`, the
reading of `prepare_put`'s) and its refusal (`PreparedPut.refused`), the holder's and the
heartbeat's retries (`commit_with`, `extend_with`), and every key range and listing rule.
What it does itself: the queries. An index is the items that hold its key attributes, in
the order of its sort key and then the table's keys, as DynamoDB keeps a sparse index.

Where it differs, as the ports allow: the indexes never lag the table, nothing is ever
unavailable or throttled, a read is never cut short by a page's size (every flag of a
complete read is True), and no TTL ever deletes a finished run. Like DynamoDB, and unlike
moto, a page that is full names a cursor even when nothing follows it, and a job's listing
refuses a cursor whose key lies outside the view's range."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from datetime import datetime, timedelta
from typing import Any

from ..domain.errors import ValidationFailed
from ..domain.instants import format_instant
from ..domain.metrics import NO_METRICS
from ..domain.repair import RepairTimings
from ..domain.run_listing import LaneRead, RunFilter, lanes_of, merge_lanes
from ..domain.runs import Run, RunState
from ..domain.tracing import TraceContext
from ..observability import current_trace
from .dynamo import Parsed, decode_cursor, encode_cursor, from_item, to_item
from .runs import (
    RunPage,
    RunStore,
    RunsView,
    SummaryPage,
    TenantListing,
    claim_key,
    commit_with,
    extend_with,
    held_span,
    key_sk,
    keys_up_to,
    lease_attributes,
    list_bounds,
    occurrence_keys,
    parse_runs,
    run_doc,
    run_sk,
    runs_after_keys,
    scheduled_between_keys,
    stored_key,
    walk_stops_at,
)

Item = dict[str, Any]  # an item in DynamoDB's attribute form, as RunStore.to_item makes it
ItemKey = tuple[str, str]  # (job_id, sk)

_JOB_KEYS = ("job_id", "sk")


def _text(item: Item, name: str) -> str | None:
    """A string attribute of `item`, None when it has none."""
    value = item.get(name)
    return None if value is None else str(value["S"])


def _value(value: Any) -> Any:
    """`value` in DynamoDB's attribute form, to compare with an item's attribute."""
    return to_item({"v": value})["v"]


class InMemoryRunStore:
    """The run store in memory: store.ports.RunStorePort, with the items RunStore writes.

    `shard_count`, `retention`, `timings`, `is_external` and `trace` are RunStore's and mean
    what they mean there (the open index's shards and instants, the claimable index's
    runs, the history's trace ids)."""

    def __init__(
        self,
        shard_count: int = 4,
        *,
        retention: timedelta = timedelta(days=30),
        timings: RepairTimings | None = None,
        is_external: Callable[[Run], bool] | None = None,
        trace: Callable[[], TraceContext | None] = current_trace,
    ) -> None:
        # RunStore without a client: its encoding, conditions and pure rules, never its I/O.
        self._encoding = RunStore(
            None,
            "memory",
            shard_count,
            retention=retention,
            timings=timings,
            is_external=is_external,
            trace=trace,
        )
        self._items: dict[ItemKey, Item] = {}  # an item is replaced whole, never changed in place
        self._lock = threading.Lock()

    # --- work lists' inputs (store.ports.RunWorkLists) ---

    @property
    def timings(self) -> RepairTimings:
        return self._encoding.timings

    def waits_for_lease(self, run: Run) -> bool:
        return self._encoding.waits_for_lease(run)

    # --- writes (store.ports.RunWrites) ---

    def insert(self, run: Run) -> bool:
        item = self._encoding.insert_request(run)["Item"]
        key = (run.job_id, key_sk(run.run_key))
        with self._lock:
            if key in self._items:
                return False
            self._items[key] = item
        return True

    def commit(self, read: Run, change: Callable[[Run], Run], *, holder: bool | None = None) -> Run:
        return commit_with(self._put, read, change, holder=holder)

    def replace(self, run: Run) -> Run:
        return self._put(run, run, holder=False)

    def _put(self, new: Run, read: Run, *, holder: bool) -> Run:
        write = self._encoding.prepare_put(new, read, holder=holder)
        item = write.request["Item"]
        key = (str(item["job_id"]["S"]), str(item["sk"]["S"]))
        with self._lock:
            stored = self._items.get(key)
            if write.admits(stored):
                self._items[key] = item
                return write.saved
        return write.refused(stored)

    def extend_lease(self, run: Run, until: datetime, *, live_at: datetime | None = None) -> Run:
        def write(read: Run, extended: Run) -> tuple[bool, Run | None]:
            key = (read.job_id, key_sk(read.run_key))
            with self._lock:
                stored = self._items.get(key)
                if stored is None or not _lease_held(stored, read, live_at):
                    return False, self._encoding.from_item(stored) if stored else None
                # What RunStore's update sets; every other attribute stays as it was.
                written = {"rev": read.rev + 1, "doc": run_doc(extended), **lease_attributes(extended)}
                self._items[key] = {**stored, **to_item(written)}
            return True, None

        return extend_with(write, run, until, live_at=live_at)

    def move_check(self, run: Run, to: datetime) -> bool:
        key = (run.job_id, key_sk(run.run_key))
        with self._lock:
            stored = self._items.get(key)
            if stored is None or stored.get("rev") != _value(run.rev) or "deadline_at" not in stored:
                return False
            self._items[key] = {**stored, "deadline_at": _value(format_instant(to))}
        return True

    def written_as(self, stored: Run | None, written: Run) -> bool:
        return self._encoding.written_as(stored, written)

    # --- reads (store.ports.RunReads) ---

    def get_by_key(self, run_key: str) -> Run | None:
        key = stored_key(run_key)
        if key is None:
            return None
        job_id, slot = key
        with self._lock:
            item = self._items.get((job_id, run_sk(slot)))
        return self._encoding.from_item(item) if item is not None else None

    def read_keys(self, keys: list[dict[str, Any]]) -> Parsed[Run]:
        with self._lock:
            found = [self._items.get((str(k["job_id"]["S"]), str(k["sk"]["S"]))) for k in keys]
        return parse_runs([item for item in found if item is not None], NO_METRICS)

    def scheduled_between(self, job_id: str, start: datetime, end: datetime, *, limit: int) -> list[Run]:
        items, _ = self._query(_in_job(job_id, *scheduled_between_keys(start, end)), ("sk",), limit=limit)
        return self._runs(items)

    def occurrences_held(
        self, job_id: str, start: datetime, end: datetime, *, max_pages: int = 20
    ) -> tuple[list[tuple[datetime, datetime]], bool]:
        items, _ = self._query(_in_job(job_id, *occurrence_keys(start, end)), ("sk",))
        spans = [held_span(str(item["sk"]["S"]), _text(item, "doc")) for item in items]
        return [span for span in spans if span is not None], True

    def runs_after(
        self, job_id: str, after: datetime | None, until: datetime, *, max_pages: int = 10
    ) -> tuple[list[Run], bool]:
        items, _ = self._query(_in_job(job_id, *runs_after_keys(after, until)), ("sk",))
        return self._runs(items), True

    def get_many(self, run_keys: list[str]) -> list[Run]:
        found = (self.get_by_key(key) for key in run_keys)
        return [run for run in found if run is not None]

    def latest_ran_before(
        self, run: Run, *, page_size: int = 100, max_pages: int = 40
    ) -> tuple[Run | None, bool]:
        items, _ = self._query(_in_job(run.job_id, *keys_up_to(run)), ("sk",), descending=True)
        earlier = next((e for e in self._runs(items) if walk_stops_at(e, run)), None)
        return earlier, True

    # --- listings (store.ports.RunListings) ---

    def list_for_job(
        self,
        job_id: str,
        *,
        limit: int,
        cursor: str | None,
        view: RunsView = "all",
        now: datetime | None = None,
    ) -> RunPage:
        start = decode_cursor(cursor, job_id, set(_JOB_KEYS)) if cursor else None
        start_sk = str(start["sk"]["S"]) if start else None
        low, high = list_bounds(view, now, start_sk)
        if start_sk is not None and not low <= start_sk <= high:
            # DynamoDB refuses a start key outside the query's range.
            raise ValidationFailed("cursor", "is not a cursor returned by this listing")
        items, last = self._query(
            _in_job(job_id, low, high), ("sk",), descending=view != "upcoming", start=start, limit=limit
        )
        return RunPage(self._runs(items), encode_cursor(last, job_id) if last else None)

    def list_for_tenant(
        self,
        tenant: str,
        run_filter: RunFilter,
        *,
        limit: int,
        cursor: str | None,
        due_by: datetime | None = None,
    ) -> SummaryPage:
        listing = TenantListing.of(tenant, run_filter, cursor, due_by)
        lanes: list[str | None] = [None] if run_filter.job_id is not None else list(lanes_of(tenant))
        items, position = merge_lanes([self._read_lane(listing, lane) for lane in lanes], limit)
        return SummaryPage(items, listing.cursor(position))

    def _read_lane(self, listing: TenantListing, lane: str | None) -> LaneRead:
        """All of one lane (or, without a lane, the filter's job's partition) that the listing's
        range and position keep, newest first: a lane read out."""
        low, high = listing.lane_range(lane)
        if lane is None:
            assert listing.run_filter.job_id is not None
            keep, order = _in_job(listing.run_filter.job_id, low, high), "sk"
        else:
            keep, order = _in_range("run_lane", lane, "run_order", low, high), "run_order"
        items, _ = self._query(keep, (order, *_JOB_KEYS), descending=True)
        entries = [item for item in items if listing.below_position(_text(item, "run_order"))]
        lowest = _text(entries[-1], "run_order") if entries else None
        return LaneRead(listing.summaries(self._runs(entries)), lowest, exhausted=True)

    def list_dead(self, tenant: str, *, limit: int, cursor: str | None) -> RunPage:
        names = ("dead_at", *_JOB_KEYS)
        start = decode_cursor(cursor, tenant, {*names, "dead_tenant"}) if cursor else None
        items, last = self._query(
            _in_range("dead_tenant", tenant, "dead_at", "", "~"),
            names,
            partition="dead_tenant",
            descending=True,
            start=start,
            limit=limit,
        )
        return RunPage(self._runs(items), encode_cursor(last, tenant) if last else None)

    # --- work lists (store.ports.RunWorkLists) ---

    def overdue_keys(
        self, shard: int, now: datetime, *, limit: int, cursor: dict[str, Any] | None = None
    ) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
        keep = _in_range("open_shard", shard, "deadline_at", "", format_instant(now))
        items, last = self._query(
            keep, ("deadline_at", *_JOB_KEYS), partition="open_shard", start=cursor, limit=limit
        )
        return [{name: item[name] for name in _JOB_KEYS} for item in items], last

    def claimable(
        self,
        tenant: str,
        job_type: str,
        now: datetime,
        *,
        limit: int,
        cursor: dict[str, Any] | None = None,
    ) -> tuple[list[Run], dict[str, Any] | None]:
        keep = _in_range("claim_key", claim_key(tenant, job_type), "due_at", "", format_instant(now))
        items, last = self._query(
            keep, ("due_at", *_JOB_KEYS), partition="claim_key", start=cursor, limit=limit
        )
        return self._runs(items), last

    # --- the queries ---

    def _query(
        self,
        keep: Callable[[Item], bool],
        order: tuple[str, ...],
        *,
        partition: str | None = None,
        descending: bool = False,
        start: Item | None = None,
        limit: int | None = None,
    ) -> tuple[list[Item], Item | None]:
        """The items `keep` accepts, ordered by the string attributes `order` names (a sort
        key, then the table's keys), after `start` (a page's last key: its `order` attributes)
        and at most `limit` of them; with the key of the last when the page is full (`order`'s
        attributes, the table's keys and `partition`'s: DynamoDB's LastEvaluatedKey)."""
        with self._lock:
            found = [item for item in self._items.values() if keep(item)]

        def position(item: Item) -> tuple[str, ...]:
            return tuple(str(item[name]["S"]) for name in order)

        found.sort(key=position, reverse=descending)
        if start is not None:
            after = position(start)
            if descending:
                found = [item for item in found if position(item) < after]
            else:
                found = [item for item in found if position(item) > after]
        page = found if limit is None else found[:limit]
        if limit is None or len(page) < limit or not page:
            return page, None
        names = {*order, *_JOB_KEYS, *([partition] if partition else [])}
        return page, {name: page[-1][name] for name in names}

    def _runs(self, items: Iterable[Item]) -> list[Run]:
        return [self._encoding.from_item(item) for item in items]


def _in_job(job_id: str, low: str, high: str) -> Callable[[Item], bool]:
    """A job's partition, sort keys from `low` to `high` inclusive."""
    return _in_range("job_id", job_id, "sk", low, high)


def _in_range(partition: str, value: Any, sort: str, low: str, high: str) -> Callable[[Item], bool]:
    """The items of one partition of the table or of an index (`partition` holds `value`;
    an item without it is not in the index) whose string `sort` lies in [low, high]."""
    wanted = _value(value)

    def keep(item: Item) -> bool:
        at = _text(item, sort)
        return item.get(partition) == wanted and at is not None and low <= at <= high

    return keep


def _lease_held(stored: Item, read: Run, live_at: datetime | None) -> bool:
    """RunStore.extend_lease's condition on the stored item: LEASED at `read`'s fence and
    rev, and with `live_at`, a lease that ends after it."""
    data = from_item({name: stored[name] for name in ("state", "fence", "rev") if name in stored})
    held = (
        data.get("state") == RunState.LEASED.value
        and data.get("fence") == read.fence
        and data.get("rev") == read.rev
    )
    if live_at is None or not held:
        return held
    expires = _text(stored, "lease_expires_at")
    return expires is not None and expires > format_instant(live_at)
