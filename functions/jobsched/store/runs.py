"""The Runs table: one item per run (SK `R#<scheduled_for>`, a manual run's `R#<instant>~m…`),
its history inside the item.

Every write is conditional: a new run only if its key is unused (the final duplicate
defence); a change only if the run is still in the state the transition starts from and
nobody wrote it since it was read (`rev`); a change by a lease holder only while its fence is
current — and that one alone is re-applied to the stored run when only `rev` moved (a
heartbeat or bookkeeping), so a holder is refused only for a wrong fence or state."""

from __future__ import annotations

import hashlib
import json
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from itertools import pairwise
from typing import Any, Literal, Protocol

from botocore.exceptions import ClientError

from ..domain.effects import excluded_until
from ..domain.errors import ConcurrentUpdate, ValidationFailed
from ..domain.instants import format_instant, parse_instant
from ..domain.lifecycle import heartbeat
from ..domain.metrics import NO_METRICS, Metrics
from ..domain.models import TOLERANT
from ..domain.repair import RepairTimings, check_at
from ..domain.run_listing import LaneRead, RunFilter, RunSummary, lanes_of, merge_lanes, run_lane, run_order
from ..domain.runs import CLAIMABLE_STATES, Run, RunState, Trigger, parse_run_key, split_run_key
from ..domain.tracing import TraceContext
from ..domain.transitions import Writer, applied_rule
from ..observability import current_trace
from .dynamo import (
    Parsed,
    batch_get,
    decode_cursor,
    encode_cursor,
    error_code,
    from_item,
    parse_items,
    retry_conflicts,
    to_item,
    translated_errors,
)
from .schema import CLAIM_INDEX, DEAD_INDEX, OPEN_INDEX, TENANT_RUNS_INDEX

RUN_PREFIX = "R#"


def _untraced(run: Run) -> Run:
    """`run` without the trace ids the store stamps (RunStore.stamped)."""
    return run.model_copy(
        update={"history": [entry.model_copy(update={"trace_id": None}) for entry in run.history]}
    )


# Run fields stored as item attributes (keys, conditions, indexes) and so not again in `doc`.
_ATTRIBUTES = ("job_id", "tenant", "state", "rev", "fence", "due_at", "blocked_by")
# Attributes of items written by an earlier version, read when the document lacks them: a
# run's priority is in its document now, left out when it is the default.
_FORMER_ATTRIBUTES = ("priority",)
_IN_KEY = {"run_key", "scheduled_for"}  # <job_id>@<scheduled_for>, the sort key R#<scheduled_for>
# Held as attributes while a lease or an in-progress record stands (lease_attributes).
_LEASE_ATTRIBUTES = ("lease_expires_at", "effect_fence", "effect_until")


# The doc's field of a run that references its job's definition (`run_doc`).
_DEFINITION = "def"

# History fields an entry leaves out when they equal the entry before it's (a claim and its
# completion share an actor, fence and attempt); a reader carries them forward.
_CARRIED = ("actor", "fence", "attempt")


def lease_attributes(run: Run) -> dict[str, Any]:
    """What a run's item holds as attributes of their own while its lease or its attempt's
    in-progress record stands, for the conditions of a renewal and of a slot's takeover
    (store.tenant_slots): the lease's end while LEASED, the record's fence and end while it
    excludes another attempt (domain.effects.excluded_until). Every write of the document
    writes these with it, and the document leaves them out (`run_doc`)."""
    values: dict[str, Any] = {}
    if run.state is RunState.LEASED and run.lease_expires_at is not None:
        values["lease_expires_at"] = format_instant(run.lease_expires_at)
    if excluded_until(run) is not None:
        assert run.effect_until is not None
        values["effect_fence"] = run.effect_fence
        values["effect_until"] = format_instant(run.effect_until)
    return values


def run_doc(run: Run) -> str:
    """The rest of the run as compact JSON.

    Every transition rewrites the whole item, so each byte is paid for four or more times:
    nulls, defaults and what the attributes already say are left out, and so is whatever a
    reader can restore exactly (`_read_doc`): an entry's source, actor, fence, attempt and
    trace id where they equal the entry before's; `created_at` and `updated_at` where they
    equal the first and the last entry's instant; the `<job_id>@` of `previous_run_key`;
    the lease's and the in-progress record's fields the item holds as attributes
    (`lease_attributes`). Field defaults are therefore part of the stored format: changing
    one changes how earlier runs read back.

    A run that references its job's definition (`definition_since`) is stored without its
    `target` and `payload` (held in memory once resolved, never written), and with the
    reference as one short field, `_DEFINITION`: `<target kind>` (empty for none) when the
    definition is of the version the run was made from (`definition_version`), else
    `<definition_since>:<target kind>`."""
    doc = run.model_dump(
        mode="json",
        exclude_none=True,
        exclude_defaults=True,
        exclude={*_ATTRIBUTES, *_IN_KEY, *lease_attributes(run), "definition_since", "target_kind"}
        | ({"target", "payload"} if run.definition_since is not None else set()),
    )
    if run.definition_since is not None:
        kind = run.target_kind or ""
        same = run.definition_since == run.definition_version
        doc[_DEFINITION] = kind if same else f"{run.definition_since}:{kind}"
    history = doc.get("history") or []
    for before, entry in reversed(list(pairwise(history))):
        # The history is a chain: each entry starts where the last ended, so its source is
        # left out, except after a gap where compaction dropped entries (`fit`).
        if entry.get("source") == before["target"]:
            entry.pop("source")
        for name in _CARRIED:
            if entry[name] == before[name]:
                del entry[name]
    # A trace id is written where it changes: an invocation's entries follow one another (a
    # claim and its completion). An entry without one after one with it is marked "".
    trace = None
    for entry in history:
        mine = entry.get("trace_id")
        if mine == trace:
            entry.pop("trace_id", None)
        elif mine is None:
            entry["trace_id"] = ""
        trace = mine
    if history:
        for name, entry in (("created_at", history[0]), ("updated_at", history[-1])):
            if doc.get(name) == entry["at"]:
                del doc[name]
    previous = doc.get("previous_run_key")
    if previous is not None and previous.startswith(run.job_id + "@"):
        doc["previous_run_key"] = previous.removeprefix(run.job_id + "@")
    return json.dumps(doc, separators=(",", ":"), ensure_ascii=False)


def _read_doc(doc: dict[str, Any], job_id: str) -> dict[str, Any]:
    """`run_doc`'s output with every field it left out restored."""
    reference = doc.pop(_DEFINITION, None)
    if reference is not None:
        since, _, kind = reference.rpartition(":")
        doc["definition_since"] = int(since) if since else doc["definition_version"]
        doc["target_kind"] = kind or None
    history = doc.get("history") or []
    trace = None
    for entry in history:
        trace = entry.setdefault("trace_id", trace) or None
        entry["trace_id"] = trace
    for before, entry in pairwise(history):
        entry.setdefault("source", before["target"])
        for name in _CARRIED:
            entry.setdefault(name, before[name])
    if history:
        doc.setdefault("created_at", history[0]["at"])
        doc.setdefault("updated_at", history[-1]["at"])
    previous = doc.get("previous_run_key")
    if previous is not None and "@" not in previous:
        doc["previous_run_key"] = f"{job_id}@{previous}"
    return doc


class RunChanged(ConcurrentUpdate):
    """The run changed since it was read; `current` is what is stored now (None if absent)."""

    def __init__(self, message: str, current: Run | None) -> None:
        super().__init__(message)
        self.current = current


@dataclass(frozen=True)
class PreparedPut:
    """A run write as `RunStore.prepare_put` builds it: `request` writes `saved` if the stored
    run is still `read` (its rev and state, and for a holder its fence)."""

    read: Run
    saved: Run
    request: dict[str, Any]
    holder: bool

    def admits(self, stored: dict[str, Any] | None) -> bool:
        """Whether `request`'s condition holds for `stored` (the item stored now, None if the
        run is absent): its rev and state are `read`'s, and for a holder its fence too."""
        values = self.request["ExpressionAttributeValues"]
        return (
            stored is not None
            and stored.get("rev") == values[":rev"]
            and stored.get("state") == values[":from"]
            and (not self.holder or stored.get("fence") == values[":fence"])
        )

    def refused(self, stored: dict[str, Any] | None, cause: Exception | None = None) -> Run:
        """What a refusal of `request` means, given the item stored now (the refusal's
        ALL_OLD image, None if the run is absent): `saved` when that item is our own write
        (the SDK re-sent a request the table had already applied, and the condition then
        failed against it), else RunChanged with the stored run.

        Only a claim or a lease holder's write identifies its writer (its owner, its fence);
        two other writers may write identical items, and each must learn that only one of
        them did."""
        if (self.holder or self.saved.state is RunState.LEASED) and stored == self.request["Item"]:
            return self.saved
        current = RunStore.from_item(stored) if stored else None
        raise RunChanged(f"run {self.read.run_key} changed concurrently", current) from cause


@dataclass(frozen=True)
class RunPage:
    items: list[Run]
    cursor: str | None


@dataclass
class SummaryPage:
    items: list[RunSummary]
    cursor: str | None


RunsView = Literal["all", "history", "upcoming"]
# Every run's sort key is RUN_PREFIX + an RFC 3339 instant (+ "~suffix"): "~" sorts after
# every character of one, so RUN_PREFIX + "~" is above every run and below the T# items.
_RUNS_END = RUN_PREFIX + "~"


def list_bounds(view: RunsView, now: datetime | None, cursor_sk: str | None) -> tuple[str, str]:
    """The sort-key range (inclusive) of a job's runs in `view` at `now`, widened to hold
    `cursor_sk` (the page's start key, which DynamoDB requires inside the range).

    Raises ValueError when a split view is asked for without `now`."""
    if view == "all":
        return RUN_PREFIX, _RUNS_END
    if now is None:
        raise ValueError(f"the {view} view needs the current instant")
    boundary = run_sk(now) + "~~"  # above every key of the instant `now` itself, manual ones too
    if view == "history":
        return RUN_PREFIX, max(boundary, cursor_sk or boundary)
    return min(boundary, cursor_sk or boundary), _RUNS_END


def _is_run_order(order: str, job_id: str | None) -> bool:
    """Whether `order` is a run's order (`<instant>#<run key>`, the key's own instant), of
    `job_id`'s runs when one is named: what a cursor of the listing across jobs holds."""
    instant, _, key = order.partition("#")
    if len(order.encode()) > 512:
        return False
    try:
        job, at, _suffix = parse_run_key(key)
    except ValueError:
        return False
    return format_instant(at) == instant and (job_id is None or job == job_id)


def _sk_of_order(order: str) -> str:
    """The sort key in a job's partition at a run order (`<instant>#<run key>`), or above
    every run of a bound's second (`<instant>~`, domain.run_listing.RunFilter.order_bounds):
    within one job the two sort alike."""
    instant, _, key = order.partition("#")
    return key_sk(key) if key else RUN_PREFIX + instant + "~"


@dataclass(frozen=True)
class TenantListing:
    """One page of a tenant's runs as asked (`RunStore.list_for_tenant`): the filter, the
    scope its cursors are bound to, the position the page starts below (a run order; None:
    the first page) and the run orders it may hold (inclusive; None: open)."""

    tenant: str
    run_filter: RunFilter
    scope: str
    before: str | None
    low: str | None
    high: str | None

    @classmethod
    def of(
        cls, tenant: str, run_filter: RunFilter, cursor: str | None, due_by: datetime | None
    ) -> TenantListing:
        """The page `cursor` names (None: the first). Without `until`, a scheduled range ends
        at `due_by` (runs made ahead are left out). Raises ValidationFailed for a cursor that
        is not this listing's: another tenant's, another filter's, or not one at all."""
        scope = hashlib.sha256(run_filter.digest().encode()).hexdigest()[:16]
        before: str | None = None
        if cursor:
            key = from_item(decode_cursor(cursor, tenant, {"tenant", "before", "filter"}))
            if key["filter"] != scope:
                raise ValidationFailed("cursor", "was returned for other filters: send the same filters")
            before = str(key["before"])
            if not _is_run_order(before, run_filter.job_id):
                raise ValidationFailed("cursor", "is not a cursor returned by this listing")
        low, high = run_filter.order_bounds()
        if run_filter.until is None and run_filter.time_field == "scheduled" and due_by is not None:
            high = RunFilter(until=due_by).order_bounds()[1]
        if before is not None and (high is None or before < high):
            high = before
        return cls(tenant, run_filter, scope, before, low, high)

    def cursor(self, position: str | None) -> str | None:
        """The cursor of the page that starts below `position` (None: there is none)."""
        if position is None:
            return None
        return encode_cursor(
            to_item({"tenant": self.tenant, "before": position, "filter": self.scope}), self.tenant
        )

    def lane_range(self, lane: str | None) -> tuple[str, str]:
        """The inclusive range to read: of a lane's run orders in the `runs_by_tenant` index,
        or (lane None) of the filter's job's sort keys. Empty when the low end is above the
        high one."""
        if lane is None:
            return RUN_PREFIX + (self.low or ""), _sk_of_order(self.high) if self.high else _RUNS_END
        return self.low or "0", self.high or "~"

    def below_position(self, order: str | None) -> bool:
        """Whether an entry of that run order belongs on this page or a later one: it has an
        order (a run written before the index existed has none) below the page's position."""
        return order is not None and (self.before is None or order < self.before)

    def summaries(self, runs: list[Run]) -> list[RunSummary]:
        """The summaries of those of `runs` that are the tenant's and that the filter keeps."""
        kept = (RunSummary.of(run) for run in runs if run.tenant == self.tenant)
        return [summary for summary in kept if self.run_filter.matches(summary)]


def claim_key(tenant: str, job_type: str) -> str:
    return f"{tenant}#{job_type}"


def run_sk(scheduled_for: datetime | str) -> str:
    instant = scheduled_for if isinstance(scheduled_for, str) else format_instant(scheduled_for)
    return RUN_PREFIX + instant


def runs_after_keys(after: datetime | None, until: datetime) -> tuple[str, str]:
    """The sort-key range (inclusive) of a job's runs scheduled after `after` (None: every
    run) and at or before `until`: each bound past every key of its second, manual ones
    included."""
    return (run_sk(after) + "~~" if after is not None else RUN_PREFIX), run_sk(until) + "~~"


def _entry_of(run_key: str) -> dict[str, Any] | None:
    """The item key of `run_key` in DynamoDB's attribute form, or None when malformed."""
    key = stored_key(run_key)
    return to_item({"job_id": key[0], "sk": run_sk(key[1])}) if key is not None else None


def key_sk(run_key: str) -> str:
    """The sort key of a run key (a manual run's suffix included)."""
    return RUN_PREFIX + split_run_key(run_key)[1]


def stored_key(run_key: str) -> tuple[str, str] | None:
    """(job id, sort-key slot) of any RFC 3339 spelling of a run key (`run_sk(slot)` is the
    sort key); None when the key is malformed."""
    try:
        job_id, scheduled_for, suffix = parse_run_key(run_key)
    except ValueError:
        return None
    return job_id, format_instant(scheduled_for) + (f"~{suffix}" if suffix else "")


def scheduled_between_keys(start: datetime, end: datetime) -> tuple[str, str]:
    """The sort-key range (inclusive) of a job's runs with start <= scheduled_for < end,
    manual runs included: "R#<end>" sorts before every key of the instant `end` itself
    ("R#<end>~m…" too)."""
    return run_sk(start), run_sk(end - timedelta(seconds=1)) + "~~"


def occurrence_keys(start: datetime, end: datetime) -> tuple[str, str]:
    """The sort-key range (inclusive) of a job's runs with start <= scheduled_for <= end."""
    return run_sk(start), run_sk(end) + "~~"


def keys_up_to(run: Run) -> tuple[str, str]:
    """The sort-key range (inclusive) of the job's runs up to `run`'s occurrence; manual runs
    of `run`'s own instant ("R#<instant>~m…") sort above it."""
    return RUN_PREFIX, run_sk(run.scheduled_for)


def held_span(sk: str, doc: str | None) -> tuple[datetime, datetime] | None:
    """The occurrences a stored item (its sort key and document) holds, as (first, last):
    a run its own instant, a SKIPPED range record up to its `skipped_through`, an item whose
    document does not parse its own instant; None for a manual run (its key space is its own)."""
    slot = sk.removeprefix(RUN_PREFIX)
    if "~" in slot:
        return None
    at = parse_instant(slot)
    through = at
    try:
        text = json.loads(doc or "").get("skipped_through")
        through = parse_instant(text) if text else at
    except Exception:
        pass  # unreadable: it holds its own key, as far as anyone can tell
    return at, max(at, through)


def walk_stops_at(earlier: Run, run: Run) -> bool:
    """Whether the overlap walk (domain.overlap) back from `run` stops at `earlier`: a
    scheduled run before `run`'s occurrence that is not SKIPPED, or is SKIPPED behind a live
    run (`overlapped_by`)."""
    if earlier.trigger is not Trigger.SCHEDULE or earlier.scheduled_for >= run.scheduled_for:
        return False
    return earlier.state is not RunState.SKIPPED or earlier.overlapped_by is not None


# A lease holder's write that lost only to a `rev` bump is re-applied this often.
HOLDER_RETRIES = 5


class ConditionalPut(Protocol):
    """A store's conditional write of a run (`RunStore._put`)."""

    def __call__(self, new: Run, read: Run, *, holder: bool) -> Run: ...


def commit_with(
    put: ConditionalPut,
    read: Run,
    change: Callable[[Run], Run],
    *,
    holder: bool | None,
) -> Run:
    """`RunStore.commit` over a store's conditional write: `put(new, read, holder=...)` writes
    `new` if the stored run is still `read` (its rev and state, and for a holder its fence)
    and returns it as written, else raises RunChanged with the stored run. `holder` None: the
    transition's row says (domain.transitions). A holder's write refused only because the
    rev moved is made again from the stored run, at most HOLDER_RETRIES times."""
    for _ in range(HOLDER_RETRIES):
        new = change(read)
        if holder is None:
            rule = applied_rule(new)
            holder = rule is not None and rule.writer is Writer.HOLDER
        try:
            return put(new, read, holder=holder)
        except RunChanged as exc:
            current = exc.current
            if not (
                holder
                and current is not None
                and current.state is read.state
                and current.fence == read.fence
                and current.rev != read.rev
            ):
                raise
            read = current
    raise RunChanged(f"run {read.run_key} keeps changing; try again", read)


# A store's conditional heartbeat (`extend_with`): (True, None) when written, else (False,
# the run as stored now, None if absent).
Heartbeat = Callable[[Run, Run], tuple[bool, Run | None]]


def extend_with(write: Heartbeat, run: Run, until: datetime, *, live_at: datetime | None) -> Run:
    """`RunStore.extend_lease` over a store's conditional heartbeat: `write(read, extended)`
    writes `extended` (`read` with the lease to `until`) if the stored run is LEASED at
    `read`'s fence and rev (with `live_at`, its lease not ended by then). Refused because
    only the rev moved, the stored run's lease is extended instead, at most HOLDER_RETRIES
    times; otherwise RunChanged: "lease lost" (absent, not LEASED, another fence) or "lease
    expired" (at `live_at`)."""
    if run.tenant_slot is not None and live_at is None:
        raise ValueError(f"run {run.run_key} holds a tenant slot: extend its lease with live_at")
    read = run
    for _ in range(HOLDER_RETRIES):
        extended = heartbeat(read, until=until)
        written, current = write(read, extended)
        if written:
            return extended.model_copy(update={"rev": read.rev + 1})
        if current is None or current.state is not RunState.LEASED or current.fence != run.fence:
            raise RunChanged(f"run {run.run_key} lease lost", current)
        if live_at is not None and not current.lease_live(live_at):
            raise RunChanged(f"run {run.run_key} lease expired", current)
        read = current
    raise RunChanged(f"run {run.run_key} keeps changing; try again", read)


# Run items left out of a read because they do not parse (`parse_runs`).
UNREADABLE_METRIC = "UnreadableRuns"


def _run_key_of(item: dict[str, Any]) -> str:
    """The run key of a run item, from its key attributes alone (`job_id`, `sk`)."""
    return f"{item['job_id']['S']}@{str(item['sk']['S']).removeprefix(RUN_PREFIX)}"


def parse_runs(items: list[dict[str, Any]], metrics: Metrics) -> Parsed[Run]:
    """The runs of run items (or stream images); an item that does not parse (a value this
    release does not know, a hand edit) is left out, logged as `unreadable run item` with its
    run key, counted (UNREADABLE_METRIC) and named in `unreadable` (store.dynamo.parse_items),
    so one item cannot break a page, a reconciler shard or a worker's claim for everyone else."""
    return parse_items(
        items, RunStore.from_item, kind="run", key=_run_key_of, metric=UNREADABLE_METRIC, metrics=metrics
    )


class RunStore:
    def __init__(
        self,
        client: Any,
        table_name: str,
        shard_count: int,
        *,
        retention: timedelta = timedelta(days=30),
        timings: RepairTimings | None = None,
        is_external: Callable[[Run], bool] | None = None,
        metrics: Metrics = NO_METRICS,
        trace: Callable[[], TraceContext | None] = current_trace,
    ) -> None:
        self._metrics = metrics
        self._trace = trace  # the writing invocation's trace: stamped on the entries it adds
        self._db = client
        # Which target-less runs wait for external workers (no handler here runs their type):
        # only those enter the claimable index. Without a router, every target-less run does.
        self._is_external = is_external or (lambda run: True)
        self._table = table_name
        self.shard_count = shard_count
        self.retention = retention
        self.timings = timings or RepairTimings()

    @property
    def client(self) -> Any:
        """The DynamoDB client this store writes with (store.tenant_slots shares it)."""
        return self._db

    @property
    def table_name(self) -> str:
        return self._table

    def waits_for_lease(self, run: Run) -> bool:
        """A run for external workers: no target, and a type no handler here runs."""
        return not run.has_target and self._is_external(run)

    def open_shard_of(self, job_id: str) -> int:
        return zlib.crc32(job_id.encode()) % self.shard_count

    # --- (de)serialisation ---

    def written_as(self, stored: Run | None, written: Run) -> bool:
        """Whether `stored` (as read back) is item for item `written`: a refused write whose
        target already holds exactly what it would have written (the SDK re-sent a request the
        table had applied, or an identical twin's write). Callers decide what that means. The
        trace ids the store stamps are left out: `written` is the caller's, unstamped, and a
        twin's write carries its own invocation's."""
        return stored is not None and self.to_item(_untraced(stored)) == self.to_item(_untraced(written))

    def stamped(self, new: Run, read: Run | None) -> Run:
        """`new` as this store writes it over `read` (None: a new run): the entries it adds to
        the history carry the writing invocation's trace id (a new run's creation, the trace
        of the request or sweep that made it). Entries already there keep theirs; outside a
        traced invocation, `new`."""
        context = self._trace()
        if context is None:
            return new
        kept = 0 if read is None else len(read.history) - (new.history_dropped - read.history_dropped)
        kept = max(1 if read is not None else 0, min(kept, len(new.history)))
        history = [
            entry
            if index < kept or entry.trace_id is not None
            else entry.model_copy(update={"trace_id": context.root})
            for index, entry in enumerate(new.history)
        ]
        return new.model_copy(update={"history": history})

    def to_item(self, run: Run) -> dict[str, Any]:
        values: dict[str, Any] = {
            "job_id": run.job_id,
            "sk": key_sk(run.run_key),
            "tenant": run.tenant,
            "state": run.state.value,
            "rev": run.rev,
            "fence": run.fence,
            "due_at": format_instant(run.due_at),
            "doc": run_doc(run),
            "run_lane": run_lane(run.tenant, run.job_id),
            "run_order": run_order(run.run_key, run.scheduled_for),
        }
        if run.blocked_by:
            values["blocked_by"] = run.blocked_by
        if run.notify:
            # For the events mappings' filters (handlers.events.filter_patterns): the run's job
            # asked for notifications, and the run may yet be found late (until the write of
            # its first claim, whose record tells a late start).
            values["notify_on"] = ",".join(sorted({kind.value for n in run.notify for kind in n.on}))
            if run.late_at is not None and run.fence <= 1:
                values["late_at"] = format_instant(run.late_at)
        waits_for_lease = self.waits_for_lease(run)
        check = check_at(run, self.timings, waits_for_lease=waits_for_lease)
        if check is not None:
            values["open_shard"] = self.open_shard_of(run.job_id)
            values["deadline_at"] = format_instant(check)
        if run.state in CLAIMABLE_STATES and not run.blocked_by and waits_for_lease:
            values["claim_key"] = claim_key(run.tenant, run.job_type)
        values.update(lease_attributes(run))
        if run.state is RunState.DEAD:
            values["dead_tenant"] = run.tenant
            values["dead_at"] = format_instant(run.finished_at or run.updated_at)
        elif run.finished_at is not None:
            values["expires_at"] = int((run.finished_at + self.retention).timestamp())
        return to_item(values)

    @staticmethod
    def from_item(item: dict[str, Any]) -> Run:
        """The run a run item holds (or a stream image of one). What this release does not know
        is ignored (attributes, and members of the document: context TOLERANT), so an item a
        newer release wrote reads; a value it cannot take (a state it does not have) raises
        (KeyError, ValueError)."""
        data = from_item(item)
        doc = _read_doc(json.loads(data["doc"]), data["job_id"])
        doc.update({name: data[name] for name in _ATTRIBUTES if name in data})
        for name in (*_LEASE_ATTRIBUTES, *_FORMER_ATTRIBUTES):  # held by the item, not the document
            if name not in doc and name in data:
                doc[name] = data[name]
        slot = data["sk"].removeprefix(RUN_PREFIX)
        doc["scheduled_for"] = slot.partition("~")[0]
        doc["run_key"] = f"{doc['job_id']}@{slot}"
        return Run.model_validate(doc, context=TOLERANT)

    def _readable(self, items: list[dict[str, Any]]) -> list[Run]:
        """The runs of a listing (`parse_runs`), those left out unnamed."""
        return parse_runs(items, self._metrics).items

    def _key(self, job_id: str, scheduled_for: datetime | str) -> dict[str, Any]:
        return to_item({"job_id": job_id, "sk": run_sk(scheduled_for)})

    def _run_key(self, run: Run) -> dict[str, Any]:
        return to_item({"job_id": run.job_id, "sk": key_sk(run.run_key)})

    # --- writes ---

    def insert_request(self, run: Run) -> dict[str, Any]:
        """The PutItem request that creates `run` unless its key exists (`insert`'s write, or
        a `Put` of a transaction that writes the run with its job)."""
        return {
            "TableName": self._table,
            "Item": self.to_item(self.stamped(run, None)),
            "ConditionExpression": "attribute_not_exists(sk)",
        }

    def insert(self, run: Run) -> bool:
        """Create the run unless its key exists. False means another writer got there first."""
        request = self.insert_request(run)
        with translated_errors():
            try:
                retry_conflicts(lambda: self._db.put_item(**request))
            except ClientError as exc:
                if error_code(exc) == "ConditionalCheckFailedException":
                    return False
                raise
        return True

    def commit(self, read: Run, change: Callable[[Run], Run], *, holder: bool | None = None) -> Run:
        """Write `change(read)` if the stored run is still in `read`'s state at `read`'s rev.

        A lease holder's write (the transition's row says so: domain.transitions, or
        `holder=True` for bookkeeping of the holder's own) also requires `read`'s fence, and
        when only the rev moved (a heartbeat, an at-most-once mark) the change is re-applied to
        the run as stored. Raises RunChanged (with the stored run) when the state or fence is
        not what the transition starts from, or, for anyone else, when the run was written
        since `read`; TransitionRefused when the change does not start from `read`."""
        return commit_with(self._put, read, change, holder=holder)

    def replace(self, run: Run) -> Run:
        """Write `run`, changed from a read at run.rev without changing its state, if the run
        is still at that rev: bookkeeping. Transitions go through `commit`."""
        return self._put(run, run, holder=False)

    def _put(self, new: Run, read: Run, *, holder: bool) -> Run:
        write = self.prepare_put(new, read, holder=holder)
        with translated_errors():
            try:
                retry_conflicts(lambda: self._db.put_item(**write.request))
            except ClientError as exc:
                if error_code(exc) != "ConditionalCheckFailedException":
                    raise
                stored: Any = exc.response.get("Item")
                return write.refused(stored, exc)
        return write.saved

    def prepare_put(self, new: Run, read: Run, *, holder: bool) -> PreparedPut:
        """The conditional put of `new` over `read` that `commit` makes, unsent: its request is
        a PutItem's arguments and equally a TransactWriteItems `Put` (store.tenant_slots sends
        it with a tenant slot). The one place a run write's condition is built."""
        saved = self.stamped(new, read).model_copy(update={"rev": read.rev + 1})
        condition = "rev = :rev AND #state = :from"
        values: dict[str, Any] = {":rev": read.rev, ":from": read.state.value}
        if holder:
            condition += " AND fence = :fence"
            values[":fence"] = read.fence
        request = {
            "TableName": self._table,
            "Item": self.to_item(saved),
            "ConditionExpression": condition,
            "ExpressionAttributeNames": {"#state": "state"},
            "ExpressionAttributeValues": to_item(values),
            "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
        }
        return PreparedPut(read, saved, request, holder)

    def _stored(self, refused: ClientError) -> Run | None:
        """The run as stored, from a refused conditional write (ReturnValuesOnConditionCheckFailure)."""
        old: Any = refused.response.get("Item")
        return self.from_item(old) if old else None

    def extend_lease(self, run: Run, until: datetime, *, live_at: datetime | None = None) -> Run:
        """Heartbeat: push the lease out while the fence is still ours; the run as written.

        With `live_at` (the holder's clock now), a lease that has already expired at that
        instant is not extended (RunChanged "lease expired"): once expired, the lease may
        have lost its tenant slot (store.tenant_slots), and renewing it would make it live
        again beside the run that took the slot. A run that holds a tenant slot
        (`run.tenant_slot`) must be extended with `live_at`; ValueError otherwise.

        Like any holder write, it is re-applied to the stored run when only the rev moved."""
        condition = "fence = :fence AND #state = :leased AND rev = :rev"
        if live_at is not None:
            condition += " AND lease_expires_at > :live_at"

        def write(read: Run, extended: Run) -> tuple[bool, Run | None]:
            # The document leaves out what the item holds as attributes: they are set with it.
            held = lease_attributes(extended)
            values: dict[str, Any] = {
                ":one": 1,
                ":fence": read.fence,
                ":rev": read.rev,
                ":leased": RunState.LEASED.value,
                ":doc": run_doc(extended),
                **{f":{name}": value for name, value in held.items()},
            }
            if live_at is not None:
                values[":live_at"] = format_instant(live_at)
            request: dict[str, Any] = {
                "TableName": self._table,
                "Key": self._run_key(read),
                # The open-index entry stays: a later lease only makes the run's repair
                # deadline later, and the reconciler moves the entry when it gets there.
                "UpdateExpression": "SET rev = rev + :one, #doc = :doc, "
                + ", ".join(f"{name} = :{name}" for name in held),
                "ConditionExpression": condition,
                "ExpressionAttributeNames": {"#state": "state", "#doc": "doc"},
                "ExpressionAttributeValues": to_item(values),
                "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
            }
            with translated_errors():
                try:
                    retry_conflicts(lambda: self._db.update_item(**request))
                except ClientError as exc:
                    if error_code(exc) != "ConditionalCheckFailedException":
                        raise
                    return False, self._stored(exc)
            return True, None

        return extend_with(write, run, until, live_at=live_at)

    def move_check(self, run: Run, to: datetime) -> bool:
        """Move a run's open-index entry (checked early, not overdue) to `to`, if the run is as read.

        Leaves rev alone: this is bookkeeping, and the lease holder's next write must not fail
        because of it. False when the run changed meanwhile (its writer set the entry anew)."""
        with translated_errors():
            try:
                retry_conflicts(
                    lambda: self._db.update_item(
                        TableName=self._table,
                        Key=self._run_key(run),
                        UpdateExpression="SET deadline_at = :to",
                        ConditionExpression="rev = :rev AND attribute_exists(deadline_at)",
                        ExpressionAttributeValues=to_item({":to": format_instant(to), ":rev": run.rev}),
                    )
                )
            except ClientError as exc:
                if error_code(exc) == "ConditionalCheckFailedException":
                    return False
                raise
        return True

    # --- reads ---

    def get(self, job_id: str, scheduled_for: datetime | str) -> Run | None:
        with translated_errors():
            response = self._db.get_item(
                TableName=self._table, Key=self._key(job_id, scheduled_for), ConsistentRead=True
            )
        item = response.get("Item")
        return self.from_item(item) if item else None

    def get_by_key(self, run_key: str) -> Run | None:
        """The run at any RFC 3339 spelling of its key; None for no run or a malformed key."""
        key = stored_key(run_key)
        return self.get(*key) if key is not None else None

    def list_for_job(
        self,
        job_id: str,
        *,
        limit: int,
        cursor: str | None,
        view: RunsView = "all",
        now: datetime | None = None,
    ) -> RunPage:
        """A job's runs in one of three views: `all` (newest scheduled first), `history`
        (scheduled at or before `now`, newest first) or `upcoming` (scheduled after `now`,
        soonest first: the runs made ahead). `now` is required for the two split views.

        A cursor resumes from its own key whatever `now` has become since: the key range is
        widened to include it, since DynamoDB refuses a start key outside the query's
        range (a page of upcoming runs whose last one is now due would else be a 400)."""
        start: dict[str, Any] | None = None
        if cursor:
            start = decode_cursor(cursor, job_id, {"job_id", "sk"})
        low, high = list_bounds(view, now, str(start["sk"]["S"]) if start else None)
        request: dict[str, Any] = {
            "TableName": self._table,
            "KeyConditionExpression": "job_id = :j AND sk BETWEEN :a AND :b",
            "ExpressionAttributeValues": to_item({":j": job_id, ":a": low, ":b": high}),
            "ScanIndexForward": view == "upcoming",
            "Limit": limit,
        }
        if start is not None:
            request["ExclusiveStartKey"] = start
        with translated_errors():
            response = self._db.query(**request)
        last = response.get("LastEvaluatedKey")
        return RunPage(
            self._readable(response.get("Items", [])),
            encode_cursor(last, job_id) if last else None,
        )

    def scheduled_between(self, job_id: str, start: datetime, end: datetime, *, limit: int) -> list[Run]:
        """A job's runs with start <= scheduled_for < end (manual runs included), oldest first."""
        low, high = scheduled_between_keys(start, end)
        request: dict[str, Any] = {
            "TableName": self._table,
            "KeyConditionExpression": "job_id = :j AND sk BETWEEN :a AND :b",
            # Consistent: a run a worker held a moment ago must be seen by the resume deciding it.
            "ConsistentRead": True,
            "ExpressionAttributeValues": to_item({":j": job_id, ":a": low, ":b": high}),
            "Limit": limit,
        }
        with translated_errors():
            response = self._db.query(**request)
        return self._readable(response.get("Items", []))

    def occurrences_held(
        self, job_id: str, start: datetime, end: datetime, *, max_pages: int = 20
    ) -> tuple[list[tuple[datetime, datetime]], bool]:
        """What the job's stored scheduled and backfill runs with start <= scheduled_for <= end
        hold, as (first, last occurrence) spans: a run its own instant, a SKIPPED range record
        up to its `skipped_through`; an item whose document does not parse its own instant
        (it holds its key all the same). Manual runs (a suffixed key) hold none. Read
        consistently, every page (a page stops at 1 MB: a few runs with large payloads),
        at most `max_pages` of them; the flag says whether the read reached `end`."""
        low, high = occurrence_keys(start, end)
        request: dict[str, Any] = {
            "TableName": self._table,
            "KeyConditionExpression": "job_id = :j AND sk BETWEEN :a AND :b",
            "ConsistentRead": True,
            "ProjectionExpression": "sk, doc",
            "ExpressionAttributeValues": to_item({":j": job_id, ":a": low, ":b": high}),
        }
        spans: list[tuple[datetime, datetime]] = []
        for _ in range(max_pages):
            with translated_errors():
                response = self._db.query(**request)
            for item in response.get("Items", []):
                span = held_span(str(item["sk"]["S"]), item.get("doc", {}).get("S"))
                if span is not None:
                    spans.append(span)
            last = response.get("LastEvaluatedKey")
            if not last:
                return spans, True
            request["ExclusiveStartKey"] = last
        return spans, False

    def runs_after(
        self, job_id: str, after: datetime | None, until: datetime, *, max_pages: int = 10
    ) -> tuple[list[Run], bool]:
        """The job's runs scheduled after `after` (None: all) and at or before `until` (its
        second's manual runs included), in key order, read consistently (a run finished a
        moment ago is seen finished), at most `max_pages` pages of up to 1 MB; the flag says
        whether the read reached `until`. Items that do not parse are left out (logged and
        counted: `parse_runs`)."""
        low, high = runs_after_keys(after, until)
        request: dict[str, Any] = {
            "TableName": self._table,
            "KeyConditionExpression": "job_id = :j AND sk BETWEEN :a AND :b",
            "ConsistentRead": True,
            "ExpressionAttributeValues": to_item({":j": job_id, ":a": low, ":b": high}),
        }
        found: list[Run] = []
        for _ in range(max_pages):
            with translated_errors():
                response = self._db.query(**request)
            found += self._readable(response.get("Items", []))
            last = response.get("LastEvaluatedKey")
            if not last:
                return found, True
            request["ExclusiveStartKey"] = last
        return found, False

    def get_many(self, run_keys: list[str]) -> list[Run]:
        """The runs at `run_keys` that exist and parse, read consistently, in the order given;
        a malformed key is left out."""
        keys = [entry for entry in (_entry_of(k) for k in run_keys) if entry is not None]
        return self.read_keys(keys).items if keys else []

    def latest_ran_before(
        self, run: Run, *, page_size: int = 100, max_pages: int = 40
    ) -> tuple[Run | None, bool]:
        """The job's latest scheduled run (trigger `schedule`) before `run`'s occurrence that
        is not SKIPPED, or is SKIPPED behind a live run (`overlapped_by`: the overlap walk
        follows it in one read): what the walk (domain.overlap) would reach from `run` through
        SKIPPED records that name only their previous. Read consistently, newest first,
        `page_size` items a page (no filter: DynamoDB would read a whole 1 MB page before
        one), at most `max_pages` pages; the flag says whether the read got an answer (a run,
        or the start of the job's runs)."""
        low, high = keys_up_to(run)
        request: dict[str, Any] = {
            "TableName": self._table,
            "KeyConditionExpression": "job_id = :j AND sk BETWEEN :a AND :b",
            "ExpressionAttributeValues": to_item({":j": run.job_id, ":a": low, ":b": high}),
            "ConsistentRead": True,
            "ScanIndexForward": False,
            "Limit": page_size,
        }
        for _ in range(max_pages):
            with translated_errors():
                response = self._db.query(**request)
            for earlier in self._readable(response.get("Items", [])):
                if walk_stops_at(earlier, run):
                    return earlier, True
            last = response.get("LastEvaluatedKey")
            if not last:
                return None, True
            request["ExclusiveStartKey"] = last
        return None, False

    def overdue(
        self, shard: int, now: datetime, *, limit: int, cursor: dict[str, Any] | None = None
    ) -> tuple[list[Run], dict[str, Any] | None]:
        """Open runs of a shard whose repair deadline has passed (the reconciler's work list)."""
        keys, cursor = self.overdue_keys(shard, now, limit=limit, cursor=cursor)
        return self.read_keys(keys).items, cursor

    def overdue_keys(
        self, shard: int, now: datetime, *, limit: int, cursor: dict[str, Any] | None = None
    ) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
        """The keys (`job_id`, `sk`) of a shard's overdue runs, oldest check first: one page of
        the keys-only index (about 100 bytes an entry), the runs themselves not read."""
        request: dict[str, Any] = {
            "TableName": self._table,
            "IndexName": OPEN_INDEX,
            "KeyConditionExpression": "open_shard = :s AND deadline_at <= :now",
            "ExpressionAttributeValues": to_item({":s": shard, ":now": format_instant(now)}),
            "Limit": limit,
        }
        if cursor:
            request["ExclusiveStartKey"] = cursor
        with translated_errors():
            response = self._db.query(**request)
        keys = [{"job_id": e["job_id"], "sk": e["sk"]} for e in response.get("Items", [])]
        return keys, response.get("LastEvaluatedKey")

    def read_keys(self, keys: list[dict[str, Any]]) -> Parsed[Run]:
        """The runs at these keys (an index's entries), read consistently, so a run repaired or
        finished since its entry was written is seen as it is now; those whose items do not
        parse are left out and named (`parse_runs`)."""
        return parse_runs(self._read_entries(keys), self._metrics)

    def _read_entries(self, entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
        keys = [{"job_id": e["job_id"], "sk": e["sk"]} for e in entries]
        return batch_get(self._db, self._table, keys) if keys else []

    def claimable(
        self,
        tenant: str,
        job_type: str,
        now: datetime,
        *,
        limit: int,
        cursor: dict[str, Any] | None = None,
    ) -> tuple[list[Run], dict[str, Any] | None]:
        """Target-less runs of one tenant and type that are due, oldest first: what an external
        worker may lease. Returns one page and the cursor of the next (None at the end)."""
        request: dict[str, Any] = {
            "TableName": self._table,
            "IndexName": CLAIM_INDEX,
            "KeyConditionExpression": "claim_key = :k AND due_at <= :now",
            "ExpressionAttributeValues": to_item(
                {":k": claim_key(tenant, job_type), ":now": format_instant(now)}
            ),
            "Limit": limit,
        }
        if cursor:
            request["ExclusiveStartKey"] = cursor
        with translated_errors():
            response = self._db.query(**request)
        # Keys-only index: read the runs, and keep those still waiting to be claimed.
        items = self._read_entries(response.get("Items", []))
        return self._readable([i for i in items if "claim_key" in i]), response.get("LastEvaluatedKey")

    def list_for_tenant(
        self,
        tenant: str,
        run_filter: RunFilter,
        *,
        limit: int,
        cursor: str | None,
        due_by: datetime | None = None,
    ) -> SummaryPage:
        """One page of the tenant's runs that `run_filter` keeps, newest scheduled first, from
        the `runs_by_tenant` index (one job's: from the job's own partition) and the runs it
        names, as summaries.
        A page may hold fewer than `limit` runs and still name a cursor (a filter that keeps
        few of the runs read); the cursor is bound to the tenant and the filter (400 for
        another). Without `until`, runs scheduled after `due_by` (made ahead) are left out.
        A run written before the index existed is listed once it is next written."""
        listing = TenantListing.of(tenant, run_filter, cursor, due_by)
        per_lane = min(limit + 1, 100)
        if run_filter.job_id is not None:
            reads = [self._read_lane(listing, None, per_lane)]
        else:
            reads = [self._read_lane(listing, lane, per_lane) for lane in lanes_of(tenant)]
        items, position = merge_lanes(reads, limit)
        return SummaryPage(items, listing.cursor(position))

    def _read_lane(
        self, listing: TenantListing, lane: str | None, limit: int, *, max_reads: int = 4
    ) -> LaneRead:
        """Read one lane of the index (or, without a lane, the job's partition: the listing's
        job filter) newest first, orders in the listing's range but below its position, until
        `limit` runs match, it is read out, or `max_reads` queries were made. The index holds
        keys only (its entry is written once, when the run is): the runs it names are then
        read by key, consistently (the index lags its table, so an entry names a run the
        table already holds: an eventually consistent read could still miss it, and the
        page's position would pass it for good); one gone since (its retention ended) is
        left out."""
        low, high = listing.lane_range(lane)
        if low > high:
            return LaneRead([], None, exhausted=True)  # nothing between (DynamoDB refuses the range)
        if lane is None:
            request: dict[str, Any] = {
                "TableName": self._table,
                "KeyConditionExpression": "job_id = :p AND sk BETWEEN :a AND :b",
                "ExpressionAttributeValues": to_item(
                    {":p": listing.run_filter.job_id, ":a": low, ":b": high}
                ),
            }
        else:
            request = {
                "TableName": self._table,
                "IndexName": TENANT_RUNS_INDEX,
                "KeyConditionExpression": "run_lane = :p AND run_order BETWEEN :a AND :b",
                "ExpressionAttributeValues": to_item({":p": lane, ":a": low, ":b": high}),
            }
        request.update(ScanIndexForward=False, Limit=limit)
        matches: list[RunSummary] = []
        lowest: str | None = None
        for _ in range(max_reads):
            with translated_errors():
                response = self._db.query(**request)
            entries = []
            for entry in response.get("Items", []):
                order = entry.get("run_order", {}).get("S")
                if not listing.below_position(order):
                    continue  # written before the listing existed; or the cursor's own run
                lowest = order
                entries.append(entry)
            # A job's partition answers the runs themselves; the index, their keys.
            items = entries if lane is None else self._read_entries(entries)
            matches += listing.summaries(self._readable(items))
            last = response.get("LastEvaluatedKey")
            if not last:
                return LaneRead(matches, lowest, exhausted=True)
            if len(matches) >= limit:
                break
            request["ExclusiveStartKey"] = last
        return LaneRead(matches, lowest, exhausted=False)

    def list_dead(self, tenant: str, *, limit: int, cursor: str | None) -> RunPage:
        """A tenant's dead-lettered runs, most recent first."""
        request: dict[str, Any] = {
            "TableName": self._table,
            "IndexName": DEAD_INDEX,
            "KeyConditionExpression": "dead_tenant = :t",
            "ExpressionAttributeValues": to_item({":t": tenant}),
            "ScanIndexForward": False,
            "Limit": limit,
        }
        if cursor:
            request["ExclusiveStartKey"] = decode_cursor(
                cursor, tenant, {"job_id", "sk", "dead_tenant", "dead_at"}
            )
        with translated_errors():
            response = self._db.query(**request)
        last = response.get("LastEvaluatedKey")
        return RunPage(
            self._readable(response.get("Items", [])),
            encode_cursor(last, tenant) if last else None,
        )
