"""The Definitions table: jobs, their sparse `due` index, and idempotency guard items."""

from __future__ import annotations

import hashlib
import json
import random
import time
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from botocore.exceptions import ClientError
from pydantic import TypeAdapter

from ..domain.errors import ConcurrentUpdate, LimitExceeded, StorageUnavailable
from ..domain.instants import format_instant, from_epoch, parse_instant
from ..domain.metrics import NO_METRICS, Metrics
from ..domain.models import TOLERANT, Definition, Job, JobSpec, JobState, MissedWindow, Target
from ..domain.run_counts import FoldMark
from ..domain.signing import SigningSecret, SigningSecrets
from ..domain.tracing import TraceContext
from ..observability import current_trace, logger
from .calendars import (
    CALENDAR_PREFIX,
    DIRECTORY_PREFIX,
    USERS_PREFIX,
    Reference,
    reference_key_of,
    reference_update,
    users_key,
)
from .dynamo import (
    CONFLICT_PAUSE,
    Parsed,
    batch_get,
    decode_cursor,
    encode_cursor,
    error_code,
    from_item,
    parse_items,
    to_item,
    translated_errors,
)
from .schema import DEFINITIONS, DUE_INDEX, TENANT_INDEX

GUARD_PREFIX = "guard#"
STATS_PREFIX = "stats#"
LIVE_PREFIX = "live#"  # per tenant: how many jobs are ACTIVE or PAUSED (the quota)
RATE_PREFIX = "rate#"  # per tenant and minute: API requests counted
# Per job: its webhook signing secrets, an item of its own so that nothing that reads or
# writes the job (its views, its runs' copy of the target, the sweeper) ever holds them.
SIGNING_PREFIX = "signing#"
# One item: the highest shard count any API or sweeper has run with against this table. A job's
# `due_shard` is crc32(job id) % shardCount as of its last write, so after shardCount is lowered
# jobs still sit in the shards above the new count until they are written again; the sweeper
# reads this item to sweep those shards too, and the preflight to refuse the lower value.
SHARD_COUNT_ITEM = "meta#shards"
# Per job and version: the target and payload a job had from that version (its
# `definition_since`) until an update replaced them, for the runs made before the update
# (`def#<job_id>#<since>`). Only `job_id`, `definition` and `expires_at` (TTL: kept as long as
# those runs may need it, services.definitions.superseded_definition_expiry): no index or
# stream filter takes it.
DEFINITION_PREFIX = "def#"
_NOT_JOBS = (
    GUARD_PREFIX,
    STATS_PREFIX,
    LIVE_PREFIX,
    RATE_PREFIX,
    SIGNING_PREFIX,
    DEFINITION_PREFIX,
    SHARD_COUNT_ITEM,
    CALENDAR_PREFIX,
    USERS_PREFIX,
    DIRECTORY_PREFIX,
)
_SECRETS = TypeAdapter(tuple[SigningSecret, ...])
LIVE_STATES = frozenset({JobState.ACTIVE, JobState.PAUSED})
# Counters kept beside the job (not in it): written with ADD by the sweeper and workers,
# so they never contend with the job's rev-conditioned writes.
STAT_NAMES = ("missed", "overlap_skipped", "excluded", "succeeded", "dead", "cancelled")
# Job items left out of a read because they do not parse (store.dynamo.parse_items).
UNREADABLE_METRIC = "UnreadableJobs"


@dataclass(frozen=True)
class Guard:
    """Records that (tenant, idempotency key) created job_id from a body with body_hash."""

    tenant: str
    key: str
    job_id: str
    body_hash: str
    expires_at: datetime


class GuardTaken(Exception):
    """The idempotency key was already used; the service decides between 200 and 409."""


# DynamoDB's TransactWriteItems takes at most 100 items and 4 MB; a transaction of new jobs is
# cut well under the size (items are counted as their attribute names and values).
MAX_TRANSACTION_ITEMS = 100
MAX_TRANSACTION_BYTES = 3_000_000
_CREATE_ATTEMPTS = 5  # transactions of one group: each refusal decides at least one entry


class ReferencedCalendarMissing(Exception):
    """A job write referencing a calendar was refused: the calendar does not exist."""

    def __init__(self, name: str) -> None:
        super().__init__(f"calendar {name} does not exist")
        self.name = name


def references_of(job: Job, delta: int) -> tuple[Reference, ...]:
    """`job` starting (`delta` 1) or stopping (-1) to reference each calendar its schedule names."""
    return tuple(Reference(job.tenant, name, delta) for name in job.spec.schedule.calendar_names)


@dataclass(frozen=True)
class NewJob:
    """A job to create (as written), its signing secrets, its idempotency guard and the Put
    requests of the runs written with it (RunStore.insert_request). A live job counts as a
    user of each calendar its schedule references (store.calendars), in its transaction."""

    job: Job
    signing: SigningSecrets | None = None
    guard: Guard | None = None
    runs: tuple[dict[str, Any], ...] = ()

    @property
    def references(self) -> tuple[Reference, ...]:
        return references_of(self.job, 1) if self.job.state in LIVE_STATES else ()

    @property
    def live(self) -> int:
        """1 when the job takes a place in the tenant's quota as written (ACTIVE or PAUSED)."""
        return 1 if self.job.state in LIVE_STATES else 0


def _item_size(item: dict[str, Any]) -> int:
    """At least the bytes DynamoDB counts for a transaction item: its attributes as UTF-8
    JSON (names, values and their type tags; a character outside ASCII is 2 to 4 bytes)."""
    body = next(iter(item.values()))
    attributes = body.get("Item") or body.get("Key") or {}
    return 100 + len(json.dumps(attributes, ensure_ascii=False, default=str).encode())


def _groups(built: list[list[dict[str, Any]]]) -> Iterator[list[int]]:
    """Consecutive entries packed into transactions: at most MAX_TRANSACTION_ITEMS items
    (one left for the live counter) and about MAX_TRANSACTION_BYTES each, and no calendar's
    users item twice (a transaction writes an item once)."""
    group: list[int] = []
    count = size = 0
    shared: set[str] = set()
    for index, items in enumerate(built):
        weight = sum(_item_size(item) for item in items)
        references = {key for key in map(reference_key_of, items) if key is not None}
        full = count + len(items) > MAX_TRANSACTION_ITEMS - 1 or size + weight > MAX_TRANSACTION_BYTES
        if group and (full or references & shared):
            yield group
            group, count, size, shared = [], 0, 0, set()
        group.append(index)
        count += len(items)
        size += weight
        shared |= references
    if group:
        yield group


def _refused_at(reasons: list[dict[str, Any]], position: int) -> bool:
    return 0 <= position < len(reasons) and reasons[position].get("Code") == "ConditionalCheckFailed"


def _referenced(references: tuple[Reference, ...], key: str | None) -> str | None:
    """The name of the calendar among `references` whose users item is `key`, if any."""
    if key is None:
        return None
    return next((r.name for r in references if users_key(r.tenant, r.name) == key), None)


def _last_of(owners: list[int], index: int) -> int:
    return len(owners) - 1 - owners[::-1].index(index)


@dataclass(frozen=True)
class Created:
    """What became of one NewJob: `created`; `guard_held` (its key holds another job: `guard`,
    None if the refusal did not carry it); `over_quota`; `calendar_missing` (a calendar it
    references does not exist: `calendar`); `conflict` (an item of it already exists, or the
    transaction kept meeting others: nothing was written); `unavailable` (the store kept
    throttling: nothing was written)."""

    kind: Literal["created", "guard_held", "over_quota", "calendar_missing", "conflict", "unavailable"]
    guard: Guard | None = None
    calendar: str | None = None


def over_quota(max_live: int) -> LimitExceeded:
    return LimitExceeded(
        f"the tenant already has {max_live} active or paused jobs (the limit); "
        "cancel some before creating more",
        limit=max_live,
    )


@dataclass(frozen=True)
class Page:
    items: list[Job]
    cursor: str | None


@dataclass(frozen=True)
class DuePage:
    """One page of a shard's due jobs (`DefinitionStore.due_jobs`): the jobs, the ids of the
    job items it left out as unreadable, and the key the next page starts from (None at the
    end)."""

    jobs: list[Job]
    unreadable: list[str]
    start: dict[str, Any] | None


def definition_id(job_id: str, since: int) -> str:
    """The key of the snapshot of `job_id`'s definition from version `since`."""
    return f"{DEFINITION_PREFIX}{job_id}#{since}"


def guard_id(tenant: str, key: str) -> str:
    # Hashed so arbitrary client keys never collide with job ids or each other across tenants.
    return GUARD_PREFIX + hashlib.sha256(f"{tenant}\x00{key}".encode()).hexdigest()


_WINDOWS = TypeAdapter(list[MissedWindow])


class DefinitionStore:
    """`trace` reads the writing invocation's trace context: each job written carries its
    trace id (Job.trace_id), or none outside a traced invocation. `metrics` counts the job
    items a read of many left out as unreadable (UNREADABLE_METRIC)."""

    def __init__(
        self,
        client: Any,
        table_name: str,
        shard_count: int,
        *,
        trace: Callable[[], TraceContext | None] = current_trace,
        metrics: Metrics = NO_METRICS,
    ) -> None:
        self._trace = trace
        self._metrics = metrics
        self._db = client
        self._table = table_name
        self.shard_count = shard_count
        self._shard_count_recorded = False

    def shard_of(self, job_id: str) -> int:
        return zlib.crc32(job_id.encode()) % self.shard_count

    # --- the shard count in use ---

    def recorded_shard_count(self) -> int | None:
        """The highest shard count recorded for this table (SHARD_COUNT_ITEM), or None before any
        API or sweeper recorded one. Raises StorageUnavailable when the table cannot be read."""
        with translated_errors():
            response = self._db.get_item(
                TableName=self._table, Key=to_item({"job_id": SHARD_COUNT_ITEM}), ConsistentRead=True
            )
        value = from_item(response.get("Item") or {}).get("highest_shard_count")
        return int(value) if value is not None else None

    def record_shard_count(self) -> int:
        """Raise the recorded highest shard count to this store's `shard_count`; never lowers it.
        Returns the highest shard count in use afterwards (the recorded one when it is higher).
        One conditional write; raises StorageUnavailable when the table cannot be written."""
        with translated_errors():
            try:
                self._db.update_item(
                    TableName=self._table,
                    Key=to_item({"job_id": SHARD_COUNT_ITEM}),
                    UpdateExpression="SET highest_shard_count = :n",
                    ConditionExpression=(
                        "attribute_not_exists(highest_shard_count) OR highest_shard_count < :n"
                    ),
                    ExpressionAttributeValues=to_item({":n": self.shard_count}),
                    ReturnValuesOnConditionCheckFailure="ALL_OLD",
                )
            except ClientError as exc:
                if error_code(exc) != "ConditionalCheckFailedException":
                    raise
                item: dict[str, Any] = dict(exc.response.get("Item") or {})  # type: ignore[call-overload]
                old = from_item(item).get("highest_shard_count")
                self._shard_count_recorded = True
                return max(self.shard_count, int(old or 0))
        self._shard_count_recorded = True
        return self.shard_count

    def shard_count_in_use(self) -> int:
        """The highest shard count in use: the recorded one, raised first to this store's own
        when it is lower (a read, and a write only then). Raises StorageUnavailable."""
        recorded = self.recorded_shard_count()
        if recorded is not None and recorded >= self.shard_count:
            self._shard_count_recorded = True
            return recorded
        return self.record_shard_count()

    def _record_shard_count_once(self) -> None:
        """Before this store first writes a job: make sure its shard count is recorded. A
        failure is logged, not raised (the sweeper records it too, every minute)."""
        if self._shard_count_recorded:
            return
        try:
            self.shard_count_in_use()
        except Exception:
            logger.warning("could not record the shard count in use", exc_info=True)

    # --- items ---

    def _job_item(self, job: Job) -> dict[str, Any]:
        values: dict[str, Any] = {
            "job_id": job.job_id,
            "tenant": job.tenant,
            "state": job.state.value,
            "version": job.version,
            "rev": job.rev,
            "created_at": format_instant(job.created_at),
            "updated_at": format_instant(job.updated_at),
            "runs_created": job.runs_created,
            "spec": job.spec.model_dump_json(exclude_none=True),
        }
        if job.next_run_at is not None:
            values["next_run_at"] = format_instant(job.next_run_at)
        if job.last_scheduled_for is not None:
            values["last_scheduled_for"] = format_instant(job.last_scheduled_for)
        if job.last_run_at is not None:
            values["last_run_at"] = format_instant(job.last_run_at)
        for name in ("paused_at", "missed_until", "counts_folded_at"):
            instant = getattr(job, name)
            if instant is not None:
                values[name] = format_instant(instant)
        if job.missed_windows:
            values["missed_windows"] = _WINDOWS.dump_json(job.missed_windows, exclude_none=True).decode()
        if job.is_due_indexed:
            values["due_shard"] = self.shard_of(job.job_id)
        if job.trace_id is not None:
            values["trace_id"] = job.trace_id
        if job.definition_since is not None:
            values["definition_since"] = job.definition_since
        if job.expires_at is not None:
            values["expires_at"] = int(job.expires_at.timestamp())  # the table's TTL
        if job.archived_at is not None:
            values["archived_at"] = format_instant(job.archived_at)
        return to_item(values)

    def _stamped(self, job: Job) -> Job:
        """`job` as this store writes it: with the writing invocation's trace id, if any."""
        context = self._trace()
        return job.model_copy(update={"trace_id": context.root if context is not None else None})

    @staticmethod
    def job_from_item(item: dict[str, Any]) -> Job:
        """The job a job item holds. What this release does not know is ignored (attributes,
        and members of the stored spec: context TOLERANT), so an item a newer release wrote
        reads; a value it cannot take (a state, a target kind it does not have) raises
        (KeyError, ValueError)."""
        data = from_item(item)
        return Job(
            job_id=data["job_id"],
            tenant=data["tenant"],
            spec=JobSpec.model_validate_json(data["spec"], context=TOLERANT),
            state=JobState(data["state"]),
            version=data["version"],
            rev=data.get("rev", 0),
            next_run_at=parse_instant(data["next_run_at"]) if data.get("next_run_at") else None,
            created_at=parse_instant(data["created_at"]),
            updated_at=parse_instant(data["updated_at"]),
            runs_created=data.get("runs_created", 0),
            last_scheduled_for=(
                parse_instant(data["last_scheduled_for"]) if data.get("last_scheduled_for") else None
            ),
            last_run_at=parse_instant(data["last_run_at"]) if data.get("last_run_at") else None,
            paused_at=parse_instant(data["paused_at"]) if data.get("paused_at") else None,
            missed_until=parse_instant(data["missed_until"]) if data.get("missed_until") else None,
            counts_folded_at=(
                parse_instant(data["counts_folded_at"]) if data.get("counts_folded_at") else None
            ),
            missed_windows=_WINDOWS.validate_json(data["missed_windows"], context=TOLERANT)
            if data.get("missed_windows")
            else [],
            trace_id=data.get("trace_id"),
            definition_since=data.get("definition_since"),
            expires_at=from_epoch(data["expires_at"]) if data.get("expires_at") else None,
            archived_at=parse_instant(data["archived_at"]) if data.get("archived_at") else None,
        )

    # --- writes ---

    def create(
        self,
        job: Job,
        guard: Guard | None,
        now: datetime,
        *,
        max_live: int = 0,
        signing: SigningSecrets | None = None,
    ) -> None:
        """Write a new job; with a guard (idempotency key), a quota (the tenant's live-job
        counter) and/or its signing secrets, all commit in one transaction or none does, so
        a job never exists without the secret its creation answered with. The first create of
        this store records its shard count first (record_shard_count).
        Raises GuardTaken, LimitExceeded (the quota) or ConcurrentUpdate."""
        if signing is None and guard is None and max_live <= 0 and not NewJob(job).references:
            self._record_shard_count_once()
            with translated_errors():
                self._db.put_item(**self._new_job_put(job))
            return
        (outcome,) = self.create_many([NewJob(job, signing, guard)], now, max_live=max_live)
        if outcome.kind == "guard_held":
            raise GuardTaken(guard.key if guard else "")
        if outcome.kind == "over_quota":
            raise over_quota(max_live)
        if outcome.kind == "calendar_missing":
            raise ReferencedCalendarMissing(outcome.calendar or "")
        if outcome.kind == "unavailable":
            raise StorageUnavailable("the store is throttling; retry with backoff")
        if outcome.kind != "created":
            raise ConcurrentUpdate("a concurrent request is creating this job; retry")

    def create_many(self, entries: list[NewJob], now: datetime, *, max_live: int = 0) -> list[Created]:
        """Write new jobs, each with its signing secrets, guard and runs (NewJob), and each
        either whole or not at all; one outcome per entry, in order.

        Entries share transactions (at most MAX_TRANSACTION_ITEMS items and about
        MAX_TRANSACTION_BYTES each), so one write commits many jobs. The quota (max_live > 0)
        holds as if the entries were created one after another in order: an entry is
        created only while the tenant's live jobs, those created before it included, are
        under max_live (a job that is no longer live once written still needs the room, as
        a single create does). A transaction refused by a condition answers with the items
        that refused it (ReturnValuesOnConditionCheckFailure): a guard taken names the job it
        holds, the live counter its count, so the entries that can still be written are sent
        again without a read. When the store keeps throttling, the entries not written by
        then are `unavailable` (those of earlier transactions keep their outcome)."""
        self._record_shard_count_once()
        outcomes: list[Created | None] = [None] * len(entries)
        built = [self._entry_items(entry, now) for entry in entries]
        for group in _groups(built):
            try:
                self._create_group(entries, built, group, max_live, outcomes)
            except StorageUnavailable:
                # The groups before were written: theirs are answered; this one's and the rest are not.
                return [o if o is not None else Created("unavailable") for o in outcomes]
        return [o if o is not None else Created("conflict") for o in outcomes]

    def _new_job_put(self, job: Job) -> dict[str, Any]:
        return {
            "TableName": self._table,
            "Item": self._job_item(self._stamped(job)),
            "ConditionExpression": "attribute_not_exists(job_id)",
        }

    def _entry_items(self, entry: NewJob, now: datetime) -> list[dict[str, Any]]:
        """The transaction items of one entry; its guard's Put, if any, is the last of them."""
        items: list[dict[str, Any]] = [{"Put": self._new_job_put(entry.job)}]
        if entry.signing is not None:
            items.append(
                {
                    "Put": {
                        "TableName": self._table,
                        "Item": self._signing_item(entry.signing),
                        "ConditionExpression": "attribute_not_exists(job_id)",
                    }
                }
            )
        items.extend({"Put": run} for run in entry.runs)
        items.extend(reference_update(self._table, reference) for reference in entry.references)
        guard = entry.guard
        if guard is not None:
            items.append(
                {
                    "Put": {
                        "TableName": self._table,
                        "Item": to_item(
                            {
                                "job_id": guard_id(guard.tenant, guard.key),
                                "ref_job_id": guard.job_id,
                                "guard_tenant": guard.tenant,
                                "body_hash": guard.body_hash,
                                "expires_at": int(guard.expires_at.timestamp()),
                            }
                        ),
                        # An expired guard that TTL has not yet deleted no longer holds the key.
                        "ConditionExpression": "attribute_not_exists(job_id) OR expires_at < :now",
                        "ExpressionAttributeValues": to_item({":now": int(now.timestamp())}),
                        # Refused: the guard that holds the key, read with the refusal.
                        "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
                    }
                }
            )
        return items

    def _create_group(
        self,
        entries: list[NewJob],
        built: list[list[dict[str, Any]]],
        group: list[int],
        max_live: int,
        outcomes: list[Created | None],
    ) -> None:
        pending = list(group)
        if max_live > 0:
            # An entry after max_live live ones of its own group cannot fit, whatever the count.
            pending = self._within_quota(entries, pending, 0, max_live, outcomes)
        stalled = 0  # transactions that decided nothing (conflicts with other writers)
        while pending and stalled < _CREATE_ATTEMPTS:
            items: list[dict[str, Any]] = []
            owners: list[int] = []
            for index in pending:
                items.extend(built[index])
                owners.extend([index] * len(built[index]))
            quota_at = -1
            if max_live > 0:
                quota_at = len(items)
                items.append(self._quota_item(entries, pending, max_live))
            try:
                with translated_errors():
                    self._db.transact_write_items(TransactItems=items)
            except ClientError as exc:
                if error_code(exc) != "TransactionCanceledException":
                    raise
                reasons: list[dict[str, Any]] = [
                    dict(r) for r in exc.response.get("CancellationReasons") or []
                ]
                left = self._after_refusal(
                    entries, pending, owners, quota_at, reasons, max_live, outcomes, items
                )
                if len(left) < len(pending):
                    pending = left
                    continue
                if any(r.get("Code") == "ThrottlingError" for r in reasons):
                    # A transaction is throttled as a whole: nothing of it was written.
                    raise StorageUnavailable("the store is throttling; retry with backoff") from exc
                conflicted = any(r.get("Code") == "TransactionConflict" for r in reasons)
                if not conflicted and not _refused_at(reasons, quota_at):
                    raise  # refused for a reason that names no entry: not ours to decide
                if conflicted:
                    time.sleep(random.uniform(0, CONFLICT_PAUSE * 2**stalled))
                stalled += 1  # the counter moved under us, or another writer held an item
                continue
            for index in pending:
                outcomes[index] = Created("created")
            return
        for index in pending:
            outcomes[index] = Created("conflict")

    def _quota_item(self, entries: list[NewJob], pending: list[int], max_live: int) -> dict[str, Any]:
        """The live counter's part of a transaction: add the live jobs it writes, if each of
        its entries finds the counter (with the live ones before it in the group) under max_live."""
        live_before_last = sum(1 for index in pending[:-1] if entries[index].live)
        added = sum(1 for index in pending if entries[index].live)
        update = self._live_update(entries[pending[0]].job.tenant, added)
        update["ConditionExpression"] = "attribute_not_exists(live) OR live < :room"
        update["ExpressionAttributeValues"] = to_item({":delta": added, ":room": max_live - live_before_last})
        update["ReturnValuesOnConditionCheckFailure"] = "ALL_OLD"
        return {"Update": update}

    @staticmethod
    def _within_quota(
        entries: list[NewJob], pending: list[int], live: int, max_live: int, outcomes: list[Created | None]
    ) -> list[int]:
        """The entries of `pending` created one after another would find room for, with
        `live` jobs live before them; the others are marked over the quota."""
        kept: list[int] = []
        for index in pending:
            if live >= max_live:
                outcomes[index] = Created("over_quota")
                continue
            kept.append(index)
            live += entries[index].live
        return kept

    def _after_refusal(
        self,
        entries: list[NewJob],
        pending: list[int],
        owners: list[int],
        quota_at: int,
        reasons: list[dict[str, Any]],
        max_live: int,
        outcomes: list[Created | None],
        items: list[dict[str, Any]],
    ) -> list[int]:
        """Decide the entries a cancelled transaction's reasons name, and return those to
        send again: a guard taken (with the guard that holds it), a calendar missing (the one
        it names), a job or secret item already there (a conflict), and, when the live counter
        refused, those past the quota."""
        live: int | None = None
        for position, reason in enumerate(reasons):
            if reason.get("Code") != "ConditionalCheckFailed":
                continue
            if position == quota_at:
                live = int(from_item(reason.get("Item") or {}).get("live", 0)) if reason.get("Item") else None
                if live is None:
                    live = self.live_jobs(entries[pending[0]].job.tenant)
                continue
            if position >= len(owners):
                continue
            index = owners[position]
            entry = entries[index]
            missing = _referenced(entry.references, reference_key_of(items[position]))
            if missing is not None:
                outcomes[index] = Created("calendar_missing", calendar=missing)
            elif entry.guard is not None and position == _last_of(owners, index):
                item = reason.get("Item")
                held = self._guard_of(item, entry.guard.key) if item else None
                outcomes[index] = Created("guard_held", held)
            else:
                outcomes[index] = Created("conflict")
        left = [index for index in pending if outcomes[index] is None]
        if live is not None:
            left = self._within_quota(entries, left, live, max_live, outcomes)
        return left

    def _live_update(self, tenant: str, delta: int, max_live: int = 0) -> dict[str, Any]:
        update: dict[str, Any] = {
            "TableName": self._table,
            "Key": to_item({"job_id": LIVE_PREFIX + tenant}),
            "UpdateExpression": "ADD live :delta",
            "ExpressionAttributeValues": to_item({":delta": delta}),
        }
        if max_live > 0:
            update["ConditionExpression"] = "attribute_not_exists(live) OR live < :max"
            update["ExpressionAttributeValues"] = to_item({":delta": delta, ":max": max_live})
        return update

    def live_jobs(self, tenant: str) -> int:
        with translated_errors():
            response = self._db.get_item(
                TableName=self._table, Key=to_item({"job_id": LIVE_PREFIX + tenant}), ConsistentRead=True
            )
        return int(from_item(response.get("Item") or {}).get("live", 0))

    def count_request(self, tenant: str, window_start: datetime, limit: int) -> bool:
        """Count one API request in the tenant's fixed window starting at `window_start` (the
        caller picks its length by how it truncates the time); False past the limit."""
        key = f"{RATE_PREFIX}{tenant}#{format_instant(window_start)}"
        with translated_errors():
            try:
                self._db.update_item(
                    TableName=self._table,
                    Key=to_item({"job_id": key}),
                    UpdateExpression="ADD hits :one SET expires_at = :expires",
                    ConditionExpression="attribute_not_exists(hits) OR hits < :limit",
                    ExpressionAttributeValues=to_item(
                        {":one": 1, ":limit": limit, ":expires": int(window_start.timestamp()) + 180}
                    ),
                )
            except ClientError as exc:
                if error_code(exc) == "ConditionalCheckFailedException":
                    return False
                raise
        return True

    def save(
        self, job: Job, *, previous_state: JobState | None = None, references: tuple[Reference, ...] = ()
    ) -> Job:
        """Replace the job if nobody wrote it since we read it (rev check); returns it with rev + 1.
        A job leaving the live states (ACTIVE/PAUSED) frees its place in the tenant's quota,
        and stops counting as a user of the calendars it references, in the same transaction;
        so do `references` (an update's calendars added and dropped). A reference added to a
        calendar that does not exist refuses the write (ReferencedCalendarMissing); one dropped
        from a calendar gone already is left out of it. A job written with `expires_at`
        (ended: the table's TTL deletes it then) gives its counters and signing secrets the
        same expiry after the write (`_expire_with_job`)."""
        saved = self._stamped(job).model_copy(update={"rev": job.rev + 1})
        put = {
            "TableName": self._table,
            "Item": self._job_item(saved),
            "ConditionExpression": "rev = :rev",
            "ExpressionAttributeValues": to_item({":rev": job.rev}),
        }
        ended = previous_state in LIVE_STATES and job.state not in LIVE_STATES
        extra: list[dict[str, Any]] = [{"Update": self._live_update(job.tenant, -1)}] if ended else []
        moved = list(references) + (list(references_of(job, -1)) if ended else [])
        for _ in range(2):  # again without the dropped references whose calendar is gone
            updates = [reference_update(self._table, reference) for reference in moved]
            with translated_errors():
                try:
                    if extra or updates:
                        self._db.transact_write_items(TransactItems=[{"Put": put}, *extra, *updates])
                    else:
                        self._db.put_item(**put)
                    break
                except ClientError as exc:
                    if error_code(exc) == "TransactionCanceledException":
                        reasons = [dict(r) for r in exc.response.get("CancellationReasons") or []]
                        start = 1 + len(extra)
                        refused = [
                            moved[i - start]
                            for i in range(start, len(reasons))
                            if reasons[i].get("Code") == "ConditionalCheckFailed"
                        ]
                        added = [r for r in refused if r.delta > 0]
                        if added:
                            raise ReferencedCalendarMissing(added[0].name) from exc
                        if refused and not _refused_at(reasons, 0):
                            moved = [r for r in moved if r not in refused]
                            continue
                    if error_code(exc) in ("ConditionalCheckFailedException", "TransactionCanceledException"):
                        raise ConcurrentUpdate(f"job {job.job_id} changed concurrently") from exc
                    raise
        else:
            raise ConcurrentUpdate(f"job {job.job_id} changed concurrently")
        if saved.expires_at is not None and saved.state not in LIVE_STATES:
            self._expire_with_job(saved.job_id, saved.expires_at)
        return saved

    def _expire_with_job(self, job_id: str, expires_at: datetime) -> None:
        """Give the job's counters item and signing secrets item the job's `expires_at`, so
        neither outlives it. Best effort (logged, not raised: the job is written), and repeated
        by every later write of the ended job (an archive). The counters item is written
        whether or not it exists (one holding only `expires_at` reads as zeros); the secrets
        item only when it exists. A rotation of the secrets after it writes them without it."""
        values = to_item({":e": int(expires_at.timestamp())})
        try:
            with translated_errors():
                self._db.update_item(
                    TableName=self._table,
                    Key=to_item({"job_id": STATS_PREFIX + job_id}),
                    UpdateExpression="SET expires_at = :e",
                    ExpressionAttributeValues=values,
                )
                try:
                    self._db.update_item(
                        TableName=self._table,
                        Key=to_item({"job_id": SIGNING_PREFIX + job_id}),
                        UpdateExpression="SET expires_at = :e",
                        ConditionExpression="attribute_exists(job_id)",
                        ExpressionAttributeValues=values,
                    )
                except ClientError as exc:
                    if error_code(exc) != "ConditionalCheckFailedException":
                        raise
        except Exception:
            logger.warning(
                "could not give the job's counters and secrets its expiry",
                exc_info=True,
                extra={"job_id": job_id},
            )

    # --- definitions of earlier versions ---

    def save_definition(
        self, job_id: str, since: int, target: Target | None, payload: Any, *, expires_at: datetime
    ) -> None:
        """Store the definition (`target`, `payload`) job `job_id` had from version `since`,
        which the table's TTL deletes after `expires_at` (services.definitions.
        superseded_definition_expiry): an unconditional put, so writing it again (the same
        content: a definition of one version never changes) is harmless, and moves
        `expires_at` to the later write's."""
        definition = Definition(target=target, payload=payload)
        with translated_errors():
            self._db.put_item(
                TableName=self._table,
                Item=to_item(
                    {
                        "job_id": definition_id(job_id, since),
                        "definition": definition.model_dump_json(exclude_none=True),
                        "expires_at": int(expires_at.timestamp()),
                    }
                ),
            )

    def definition(self, job_id: str, since: int) -> tuple[Target | None, Any] | None:
        """(target, payload) of job `job_id` from version `since` as `save_definition`
        stored it (strongly consistent), or None when none was stored."""
        with translated_errors():
            response = self._db.get_item(
                TableName=self._table,
                Key=to_item({"job_id": definition_id(job_id, since)}),
                ConsistentRead=True,
            )
        item = response.get("Item")
        if not item:
            return None
        stored = Definition.model_validate_json(from_item(item)["definition"], context=TOLERANT)
        return stored.target, stored.payload

    # --- signing secrets ---

    @staticmethod
    def _signing_item(signing: SigningSecrets) -> dict[str, Any]:
        return to_item(
            {
                "job_id": SIGNING_PREFIX + signing.job_id,
                "signing_tenant": signing.tenant,  # not `tenant`: kept out of the tenant index
                "rev": signing.rev,
                "secrets": _SECRETS.dump_json(signing.secrets).decode(),
            }
        )

    def signing_secrets(self, job_id: str) -> SigningSecrets | None:
        """The job's signing secrets (strongly consistent: a job's first delivery may follow
        its creation by milliseconds), or None for a job created before jobs had them."""
        with translated_errors():
            response = self._db.get_item(
                TableName=self._table, Key=to_item({"job_id": SIGNING_PREFIX + job_id}), ConsistentRead=True
            )
        item = response.get("Item")
        if not item:
            return None
        data = from_item(item)
        return SigningSecrets(
            job_id=job_id,
            tenant=data["signing_tenant"],
            secrets=_SECRETS.validate_json(data["secrets"], context=TOLERANT),
            rev=int(data["rev"]),
        )

    def save_signing_secrets(self, signing: SigningSecrets, *, previous: SigningSecrets | None) -> None:
        """Replace the secrets read as `previous` (None: there were none), or ConcurrentUpdate."""
        saved = signing.model_copy(update={"rev": (previous.rev + 1) if previous else 0})
        condition: dict[str, Any] = (
            {
                "ConditionExpression": "rev = :rev",
                "ExpressionAttributeValues": to_item({":rev": previous.rev}),
            }
            if previous is not None
            else {"ConditionExpression": "attribute_not_exists(job_id)"}
        )
        with translated_errors():
            try:
                self._db.put_item(TableName=self._table, Item=self._signing_item(saved), **condition)
            except ClientError as exc:
                if error_code(exc) == "ConditionalCheckFailedException":
                    raise ConcurrentUpdate(
                        f"the signing secrets of job {signing.job_id} changed concurrently"
                    ) from exc
                raise

    def add_stats(self, job_id: str, **counts: int) -> None:
        counts = {k: v for k, v in counts.items() if v}
        if not counts:
            return
        unknown = set(counts) - set(STAT_NAMES)
        if unknown:
            raise ValueError(f"unknown job counters: {sorted(unknown)}")
        with translated_errors():
            self._db.update_item(
                TableName=self._table,
                Key=to_item({"job_id": STATS_PREFIX + job_id}),
                UpdateExpression="ADD " + ", ".join(f"{name} :{name}" for name in counts),
                ExpressionAttributeValues=to_item({f":{k}": v for k, v in counts.items()}),
            )

    def counters(self, job_id: str) -> tuple[dict[str, int], FoldMark | None]:
        """The job's stored counters (STAT_NAMES), read consistently, and its fold's mark
        (None: never folded). `succeeded` holds what completions added and folds stored:
        services.job_counts.JobCounts.counters gives the job's count. Raises
        StorageUnavailable."""
        with translated_errors():
            response = self._db.get_item(
                TableName=self._table,
                Key=to_item({"job_id": STATS_PREFIX + job_id}),
                ConsistentRead=True,
            )
        data = from_item(response.get("Item") or {})
        counts = {name: int(data.get(name, 0)) for name in STAT_NAMES}
        if "fold_rev" not in data:
            return counts, None
        to = data.get("fold_to")
        mark = FoldMark(
            to=parse_instant(to) if to else None,
            open=tuple(json.loads(data.get("fold_open") or "[]")),
            rev=int(data["fold_rev"]),
            counted=int(data.get("fold_counted", 0)),
        )
        return counts, mark

    def save_fold(self, job_id: str, read: FoldMark | None, folded: FoldMark, added: int) -> bool:
        """Move the job's fold from the mark read (`read`, None: none stored) to `folded`,
        adding `added` to `succeeded`, if no other fold moved it since (the mark's `rev`).
        Returns whether it was written; raises StorageUnavailable."""
        names = {"#open": "fold_open", "#rev": "fold_rev"}
        values: dict[str, Any] = {
            ":open": json.dumps(list(folded.open), separators=(",", ":")),
            ":rev": folded.rev,
            ":added": added,
        }
        sets = "#open = :open, #rev = :rev"
        if folded.to is not None:
            names["#to"] = "fold_to"
            values[":to"] = format_instant(folded.to)
            sets += ", #to = :to"
        if read is None:
            condition = "attribute_not_exists(#rev)"
        else:
            condition = "#rev = :read"
            values[":read"] = read.rev
        with translated_errors():
            try:
                self._db.update_item(
                    TableName=self._table,
                    Key=to_item({"job_id": STATS_PREFIX + job_id}),
                    UpdateExpression=f"SET {sets} ADD succeeded :added, fold_counted :added",
                    ConditionExpression=condition,
                    ExpressionAttributeNames=names,
                    ExpressionAttributeValues=to_item(values),
                )
            except ClientError as exc:
                if error_code(exc) == "ConditionalCheckFailedException":
                    return False
                raise
        return True

    # --- reads ---

    def _jobs(self, items: list[dict[str, Any]]) -> Parsed[Job]:
        """The jobs of `items`; an item that does not parse is left out, logged with its job
        id, counted (UNREADABLE_METRIC) and named (store.dynamo.parse_items)."""
        return parse_items(
            items,
            self.job_from_item,
            kind="job",
            key=lambda item: str(item["job_id"]["S"]),
            metric=UNREADABLE_METRIC,
            metrics=self._metrics,
        )

    def due_jobs(
        self, shard: int, until: datetime, *, limit: int, start: dict[str, Any] | None = None
    ) -> DuePage:
        """ACTIVE jobs of one shard whose next occurrence is at or before `until` (sweeper input),
        in next_run_at order as the index had them, and the key of the next page (None at the end).

        The index is sparse and sorted by next_run_at, so this reads only what is due. It
        carries keys only: the jobs are then read by key (BatchGetItem, strongly consistent),
        and one the index still lists but that is no longer ACTIVE and due (paused, updated,
        advanced since: the index lags its table) is left out. Raises StorageUnavailable when
        the store keeps throttling the reads.

        A job item that does not parse is left out too, and named in the page's `unreadable`
        (logged and counted: `_jobs`): failing the page instead would hold back every job
        behind it in the shard, tick after tick, for the sake of one nobody can sweep. Leaving
        it out loses nothing that reading it again could save: it keeps its place in the
        index, so every sweep meets it again, and counts it, until it is readable (a roll
        forward, a fix by hand), when it is swept from where it stood."""
        request: dict[str, Any] = {
            "TableName": self._table,
            "IndexName": DUE_INDEX,
            "KeyConditionExpression": "due_shard = :s AND next_run_at <= :until",
            "ExpressionAttributeValues": to_item({":s": shard, ":until": format_instant(until)}),
            "Limit": limit,
        }
        if start:
            request["ExclusiveStartKey"] = start
        with translated_errors():
            response = self._db.query(**request)
        keys = [{"job_id": entry["job_id"]} for entry in response.get("Items", [])]
        found = self._jobs(batch_get(self._db, self._table, keys) if keys else [])
        due = [
            job
            for job in found.items
            if job.state is JobState.ACTIVE and job.next_run_at is not None and job.next_run_at <= until
        ]
        return DuePage(due, found.unreadable, response.get("LastEvaluatedKey"))

    def get(self, job_id: str) -> Job | None:
        with translated_errors():
            response = self._db.get_item(
                TableName=self._table, Key=to_item({"job_id": job_id}), ConsistentRead=True
            )
        item = response.get("Item")
        if not item or job_id.startswith(_NOT_JOBS):
            return None
        return self.job_from_item(item)

    def get_many(self, job_ids: list[str]) -> list[Job]:
        """The jobs of `job_ids` that exist (strongly consistent), in the order given.

        A job item that does not parse is left out as if absent (logged and counted: `_jobs`),
        so that it fails no answer about the others: a batch create's replays, the console's
        job names. One id alone is read as `get` reads it, and raises what it raises."""
        if len(job_ids) == 1:
            job = self.get(job_ids[0])
            return [job] if job is not None else []
        keys = [to_item({"job_id": job_id}) for job_id in job_ids if not job_id.startswith(_NOT_JOBS)]
        return self._jobs(batch_get(self._db, self._table, keys)).items if keys else []

    def get_guard(self, tenant: str, key: str) -> Guard | None:
        with translated_errors():
            response = self._db.get_item(
                TableName=self._table, Key=to_item({"job_id": guard_id(tenant, key)}), ConsistentRead=True
            )
        item = response.get("Item")
        return self._guard_of(item, key) if item else None

    @staticmethod
    def _guard_of(item: dict[str, Any], key: str) -> Guard:
        data = from_item(item)
        return Guard(
            tenant=data["guard_tenant"],
            key=key,
            job_id=data["ref_job_id"],
            body_hash=data["body_hash"],
            expires_at=from_epoch(data["expires_at"]),
        )

    def list_for_tenant(
        self,
        tenant: str,
        *,
        state: JobState | None,
        limit: int,
        cursor: str | None,
        archived: bool | None = None,
        max_rounds: int = 10,
    ) -> Page:
        """The tenant's jobs, newest first: in `state` when given; archived ones only
        (`archived` True), none of them (False) or both (None). A filter may return short
        pages; the cursor continues. A job item that does not parse is left out of the page
        (logged and counted: `_jobs`), as a filter leaves a job out: one item the API cannot
        show must not make the tenant's whole listing fail, and nothing is lost by not
        listing it (the item stays as it is, and the alarm on its count names it to the
        operator)."""
        key_names = {"job_id", "tenant", "created_at"}
        start = decode_cursor(cursor, tenant, key_names) if cursor else None
        items: list[Job] = []
        for _ in range(max_rounds):
            request: dict[str, Any] = {
                "TableName": self._table,
                "IndexName": TENANT_INDEX,
                "KeyConditionExpression": "tenant = :t",
                "ExpressionAttributeValues": to_item({":t": tenant}),
                "ScanIndexForward": False,
                "Limit": limit - len(items),
            }
            if state is not None:
                request["FilterExpression"] = "#s = :s"
                request["ExpressionAttributeNames"] = {"#s": "state"}
                request["ExpressionAttributeValues"].update(to_item({":s": state.value}))
            if start:
                request["ExclusiveStartKey"] = start
            with translated_errors():
                response = self._db.query(**request)
            # The index carries keys and state only: read the jobs the page found.
            keys = [{"job_id": e["job_id"]} for e in response.get("Items", [])]
            found = batch_get(self._db, self._table, keys) if keys else []
            jobs = self._jobs(found).items
            items.extend(  # as each is now
                j
                for j in jobs
                if (state is None or j.state is state)
                and (archived is None or (j.archived_at is not None) is archived)
            )
            start = response.get("LastEvaluatedKey")
            if not start or len(items) >= limit:
                break
        next_cursor = encode_cursor(start, tenant) if start else None
        return Page(items=items, cursor=next_cursor)


__all__ = [
    "DEFINITIONS",
    "Created",
    "DefinitionStore",
    "DuePage",
    "Guard",
    "GuardTaken",
    "NewJob",
    "Page",
    "guard_id",
]
