"""TENANT_CONCURRENCY made exact: a claim takes one of its tenant's slots in the same
DynamoDB transaction that claims the run, so no number of concurrent claimers, and no index
lag, can put more than `limit` of a tenant's runs under live leases (or with effects still
running: see "held" below) at once.

A tenant has `limit` slots, items of the Runs table:

    job_id = "slots#" + sha256(tenant)   sk = "S#<index>", 0 <= index < limit
    run_job, run_sk, run_fence           the holder: the run (its key) and the claim's fence
    lease_until                          the lease that claim wrote (a hint, see below)

A slot is **held** while its holder run is LEASED under `run_fence` with a lease still live,
or while the in-progress record of that claim's effect (`effect_fence = run_fence`, until
`effect_until`, the claiming invocation's deadline) is open: an attempt that stopped waiting
for its effect at its timeout, or whose lease expired under it, leaves the effect running,
and it counts until it has ended (its result saved) or its invocation has. Otherwise the
slot is free, whether its item is absent (released) or not (a release was lost, the holder
died). Liveness is the run item's, never the slot's: the hint `lease_until` only says when a
holder is worth checking (a heartbeat extends the run's lease, not the hint; a release that
keeps the slot for a running effect moves the hint to the record's end).

A claim is one TransactWriteItems of
  1. the slot's Put: on an absent slot, or over the holder it was read with;
  2. when that holder is another run: a ConditionCheck on the holder's run item,
     `NOT (state = LEASED AND fence = :f AND lease_expires_at > :cutoff) AND
     NOT (effect_fence = :f AND effect_until > :cutoff)`, with cutoff = now - `steal_after`
     (a lease is taken over only once it has been expired for that long, so a holder whose
     clock lags by less cannot renew it in between); when the holder is the run being
     claimed, the claim's own condition (its rev and state) proves that lease over instead
     (a run cannot be checked and written in one transaction), and its own earlier claim's
     slot is taken only when that claim's effect record, as read, is closed;
  3. the run's claim, `RunStore.prepare_put`'s conditional Put (rev and state as read), the
     run carrying `tenant_slot = index`.
All three commit or none does: there is no state in which a slot is taken for a claim that
did not happen, or a claim holds no slot.

What keeps a slot's count exact after the transaction: a holder's lease is only ever
extended while it is live (`RunStore.extend_lease(..., live_at=now)`, required for a run
with a `tenant_slot`), so a holder judged dead by a ConditionCheck stays dead; and a fence
is claimed once, so a run holds at most one live slot.

Why the Runs table and this key: the claim is a write of the run item, so the transaction
stays in one table and on the roles that already write runs. No index picks a slot item up
(none of its attributes is a key of `open`, `dead_by_tenant`, `claimable` or
`runs_by_tenant`); no listing does (a job's runs are `R#…` sort keys of its own
partition; the chaos checker's scan, the outbox's stream filter and the stream audit all
require `sk` to begin with `R#`); it has no `expires_at`, so TTL leaves it alone. Its stream
records (a put per claim, a delete per release) are dropped by the outbox's event filter,
which Lambda does not bill. The tenant id (up to 256 printable characters, any of them
hostile) appears only through its SHA-256, so a key is 70 bytes whatever the tenant.

The limit changing while slots are held: raised, the new slots are simply free. Lowered,
the slots past the new limit still count, so while any is present no claim is made: each
claim that finds one first deletes those whose holder is dead and moves each live one into
an absent slot below the limit (one transaction each; the holder keeps it under another
index). Nothing creates a slot past the limit any more, so a claim made when none is
present meets only the `limit` slots below it: exact again as soon as no claimer uses the
old limit (a deploy that changes it runs both for a moment: then at most the higher). The
limit 0 is no limit: `claim` is `RunStore.commit`, with no slot read or written. Leases
claimed while the limit was 0 hold no slot and are not counted after it is set; they end
with their lease.

Cost, per claim of a tenant under its limit: one consistent Query of the tenant's slot
partition (the slots held now, ~170 bytes each: 1 read unit up to ~24 held, 3 at 50) and
one transaction (2 write units for the slot, 2 per KB of the run, where a plain claim pays
1; a takeover adds 2 for the ConditionCheck); per release one DeleteItem (1 write unit), or,
for an effect still running, one UpdateItem of the hint and the DeleteItem when it ends.
A run back from waiting for a slot looks first (the worker: `holders`, then `at_limit`,
before it reads the run): a look that finds every slot held costs that one Query instead of
the run's read and the Query, and a look that finds one free hands what it read to `claim`.
Every claim and release of one tenant writes the same partition key: ~3 write units a run,
so one tenant's claims top out near 330 a second on one partition's 1,000 WCU/s unless
DynamoDB splits it for heat.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from botocore.exceptions import ClientError

from ..domain.effects import MAX_CLOCK_SKEW, excluded_until
from ..domain.errors import StorageUnavailable, TenantAtLimit
from ..domain.instants import format_instant, parse_instant
from ..domain.runs import Run, RunState, split_run_key
from ..observability import logger
from .dynamo import error_code, from_item, retry_conflicts, to_item, translated_errors
from .runs import RunChanged, RunStore, key_sk

SLOT_PREFIX = "slots#"
SLOT_SK_PREFIX = "S#"
# Transactions a claim sends before it gives up on a tenant whose slots keep changing.
CLAIM_ATTEMPTS = 8
# A holder's lease is taken over only this long after it expired (see the module docstring).
# Two clocks may differ by twice domain.effects.MAX_CLOCK_SKEW: a holder whose clock lags by
# less can no longer renew a lease judged expired this long ago.
STEAL_AFTER = 2 * MAX_CLOCK_SKEW
# Cancellation reasons that mean "the store is throttling": the caller may retry later.
_THROTTLED = {"ThrottlingError", "ProvisionedThroughputExceeded", "RequestLimitExceeded"}
_LOST = {"ConditionalCheckFailed", "TransactionConflict"}
_HOLDER_NAMES = {"#rj": "run_job", "#rs": "run_sk", "#rf": "run_fence"}
_HOLDER_MATCHES = "#rj = :rj AND #rs = :rs AND #rf = :rf"


def _holder_values(run_job: str, run_sk: str, fence: int) -> dict[str, Any]:
    return to_item({":rj": run_job, ":rs": run_sk, ":rf": fence})


def slot_partition(tenant: str) -> str:
    """The partition key of a tenant's slots: a digest, stable across processes and versions
    (any tenant id, however long or odd, maps to 64 hex characters)."""
    return SLOT_PREFIX + hashlib.sha256(tenant.encode("utf-8", "surrogatepass")).hexdigest()


def slot_key(tenant: str, index: int) -> dict[str, Any]:
    return to_item({"job_id": slot_partition(tenant), "sk": f"{SLOT_SK_PREFIX}{index}"})


@dataclass(frozen=True)
class SlotHolder:
    """A present slot item: who took the slot, and the lease that claim wrote."""

    index: int
    run_job: str
    run_sk: str
    fence: int
    lease_until: datetime

    @classmethod
    def of(cls, run: Run, index: int) -> SlotHolder:
        """The holder a claim of `run` (as written, LEASED) records in slot `index`."""
        assert run.lease_expires_at is not None
        return cls(index, run.job_id, key_sk(run.run_key), run.fence, run.lease_expires_at)

    def item(self, tenant: str) -> dict[str, Any]:
        """The slot item recording this holder."""
        return {
            **slot_key(tenant, self.index),
            **to_item(
                {
                    "run_job": self.run_job,
                    "run_sk": self.run_sk,
                    "run_fence": self.fence,
                    "lease_until": format_instant(self.lease_until),
                }
            ),
        }

    def is_run(self, run: Run) -> bool:
        return self.is_key(run.run_key)

    def is_key(self, run_key: str) -> bool:
        """Whether this slot was taken by a claim of the run `run_key` (a malformed key: no)."""
        try:
            job_id = split_run_key(run_key)[0]
        except ValueError:
            return False
        return self.run_job == job_id and self.run_sk == key_sk(run_key)

    def worth_checking(self, cutoff: datetime) -> bool:
        """The lease its claim wrote has been expired since `cutoff`: the holder may be dead
        (or may have renewed: only its run item says)."""
        return self.lease_until <= cutoff

    def matches(self) -> dict[str, Any]:
        return _holder_values(self.run_job, self.run_sk, self.fence)

    def run_key(self) -> dict[str, Any]:
        return to_item({"job_id": self.run_job, "sk": self.run_sk})


@dataclass(frozen=True)
class _Cancelled:
    """A cancelled transaction: one reason per item, in order, and the error itself."""

    reasons: list[dict[str, Any]]
    error: ClientError

    def code(self, at: int) -> str:
        return str(self.reasons[at].get("Code"))

    def item(self, at: int) -> dict[str, Any] | None:
        item: dict[str, Any] | None = self.reasons[at].get("Item")
        return item


@dataclass(frozen=True)
class _Take:
    index: int
    over: SlotHolder | None  # the holder the slot is taken from; None for an absent slot


class TenantSlots:
    """The tenant concurrency limit as slot items beside the runs (see the module docstring).

    One instance per process is enough: it keeps no state between calls. `limit` is
    TENANT_CONCURRENCY (0 = no limit); every claimer of a deployment must use the same."""

    def __init__(
        self,
        runs: RunStore,
        limit: int,
        *,
        steal_after: timedelta = STEAL_AFTER,
        attempts: int = CLAIM_ATTEMPTS,
        rng: random.Random | None = None,
    ) -> None:
        if limit < 0:
            raise ValueError("limit must be 0 (no limit) or more")
        self._runs = runs
        self._db = runs.client
        self._table = runs.table_name
        self.limit = limit
        self.steal_after = steal_after
        self.attempts = attempts
        self._random = rng or random.Random()  # which free slot to try (spreads claimers out)

    # --- claiming ---

    def claim(
        self,
        read: Run,
        change: Callable[[Run], Run],
        *,
        now: datetime,
        holders: list[SlotHolder] | None = None,
    ) -> Run:
        """Write `change(read)` (a claim: it must return the run LEASED, with a lease) if the
        stored run is still `read` AND one of the tenant's slots is free, both in one write.

        Takes: the run as read, the claim transition (e.g. `lifecycle.claim(...)` bound to
        its arguments), the claimer's clock `now` (a holder's lease counts as expired
        once `now - steal_after` has passed it), and optionally the tenant's `holders` as
        the caller read them just before: the first try then chooses from those instead of
        reading them again. A slot taken since is refused by the transaction and the next
        try reads them afresh; a slot freed since is not seen (holders that leave no slot to
        try raise TenantAtLimit at once, as a read made then would have).
        Returns: the run as written, with `tenant_slot` set (None when the limit is 0).
        Raises:
          - TenantAtLimit: every slot is held by a live lease (or the slots kept changing
            under `attempts` transactions): nothing was written; try again later.
          - RunChanged (with the stored run, None if absent): the run is not as read, as
            `RunStore.commit` raises; nothing was written.
          - TransitionRefused from `change`; StorageUnavailable when the store throttles.
        Guarantees: at no instant do more than `limit` of the tenant's claims made through
        here hold a live lease or an open effect record (see the module docstring for a lowered limit).
        The caller must: extend the lease only with `RunStore.extend_lease(run, until,
        live_at=now)`, and call `release` with the run as written by the transition that
        takes it out of LEASED."""
        if self.limit == 0:  # no slot: one a run kept from an earlier claim is not its own
            return self._runs.commit(read, lambda r: change(r).model_copy(update={"tenant_slot": None}))
        leased = change(read)
        if leased.state is not RunState.LEASED or leased.lease_expires_at is None:
            raise ValueError(f"run {read.run_key}: a claim must leave the run LEASED with a lease")
        given = holders
        for _ in range(self.attempts):
            holders, given = (given if given is not None else self.holders(read.tenant)), None
            if any(h.index >= self.limit for h in holders):
                # The limit was lowered: no claim until every slot past it is gone (deleted
                # once dead, or moved below it), since they count as much as the slots below.
                if self._settle_past_limit(read.tenant, holders, now):
                    continue
                take = None
            else:
                take = self._choose(holders, read, now)
            if take is None:
                raise TenantAtLimit(
                    f"tenant {read.tenant!r} has {self.limit} runs under way (its limit)",
                    limit=self.limit,
                )
            written = self._take(take, read, leased, now)
            if written is not None:
                return written
        raise TenantAtLimit(
            f"tenant {read.tenant!r}'s slots kept changing under {self.attempts} claims; try again",
            limit=self.limit,
        )

    def at_limit(self, holders: list[SlotHolder], run_key: str, *, now: datetime) -> bool:
        """Whether a claim of the run `run_key` at `now`, given the tenant's `holders` as just
        read, would find no slot to try and raise TenantAtLimit before any write: every slot
        below the limit is present, none lies past it (a lowered limit: the claim settles
        those), none was taken by a claim of this run (the claim may take it back), and none
        is worth checking (its hint expired by `now - steal_after`: its holder may be dead).
        Pure. False says only that a claim must decide: the slots' holders may be live.
        With the limit 0: False (no limit)."""
        if self.limit == 0:
            return False
        cutoff = now - self.steal_after
        below = {h.index for h in holders if 0 <= h.index < self.limit}
        return (
            len(below) == self.limit
            and all(0 <= h.index < self.limit for h in holders)
            and not any(h.is_key(run_key) or h.worth_checking(cutoff) for h in holders)
        )

    def _choose(self, holders: list[SlotHolder], read: Run, now: datetime) -> _Take | None:
        """The slot to try: the run's own (its previous claim's, lease expired), else a random
        absent one (concurrent claimers spread out), else one whose holder may be dead."""
        present = {h.index: h for h in holders}
        mine = [h for h in holders if h.is_run(read)]
        # Never the one an earlier claim of this run keeps for its effect still running.
        own = next((h for h in mine if not _effect_open(read, h.fence, now)), None)
        if own is not None:
            return _Take(own.index, own)
        absent = [i for i in range(self.limit) if i not in present]
        if absent:
            return _Take(self._random.choice(absent), None)
        cutoff = now - self.steal_after
        stale = [h for h in holders if h.worth_checking(cutoff) and not h.is_run(read)]
        return _Take((h := self._random.choice(stale)).index, h) if stale else None

    def _take(self, take: _Take, read: Run, leased: Run, now: datetime) -> Run | None:
        """One claim transaction; the run as written, or None to try another slot."""
        slotted = leased.model_copy(update={"tenant_slot": take.index})
        write = self._runs.prepare_put(slotted, read, holder=False)
        slot: dict[str, Any] = {
            "TableName": self._table,
            "Item": SlotHolder.of(write.saved, take.index).item(read.tenant),
        }
        if take.over is None:
            slot["ConditionExpression"] = "attribute_not_exists(job_id)"
        else:
            slot["ConditionExpression"] = _HOLDER_MATCHES
            slot["ExpressionAttributeNames"] = _HOLDER_NAMES
            slot["ExpressionAttributeValues"] = take.over.matches()
        items: list[dict[str, Any]] = [{"Put": slot}]
        check_at: int | None = None
        if take.over is not None and not take.over.is_run(read):
            check_at = len(items)
            items.append({"ConditionCheck": self._holder_dead(take.over, now)})
        run_at = len(items)
        items.append({"Put": write.request})
        cancelled = self._transact(items)
        if cancelled is None:
            return write.saved
        if cancelled.code(run_at) == "ConditionalCheckFailed":
            return write.refused(cancelled.item(run_at), cancelled.error)  # ours, or RunChanged
        if cancelled.code(run_at) == "TransactionConflict":
            # Another write of the run is in flight: if it changed the run, say so.
            current = self._runs.get_by_key(read.run_key)
            if current is None or current.rev != read.rev:
                raise RunChanged(f"run {read.run_key} changed concurrently", current)
            return None
        if check_at is not None and cancelled.code(check_at) == "ConditionalCheckFailed":
            assert take.over is not None  # the holder is alive: look elsewhere
            self._renew_hint(read.tenant, take.over, cancelled.item(check_at))
            return None
        if cancelled.code(0) in _LOST or (check_at is not None and cancelled.code(check_at) in _LOST):
            return None  # the slot went to another claimer, or its holder is being written
        raise cancelled.error

    def _holder_dead(self, holder: SlotHolder, now: datetime) -> dict[str, Any]:
        """A ConditionCheck that passes unless the holder still holds its lease, or its
        claim's effect record is still open (as of the cutoff); its refusal returns the
        holder's run item, whose lease or record end renews the hint."""
        return {
            "TableName": self._table,
            "Key": holder.run_key(),
            "ConditionExpression": (
                "NOT (#state = :leased AND fence = :f AND lease_expires_at > :cutoff)"
                " AND NOT (effect_fence = :f AND effect_until > :cutoff)"
            ),
            "ExpressionAttributeNames": {"#state": "state"},
            "ExpressionAttributeValues": to_item(
                {
                    ":leased": RunState.LEASED.value,
                    ":f": holder.fence,
                    ":cutoff": format_instant(now - self.steal_after),
                }
            ),
            "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
        }

    def _transact(self, items: list[dict[str, Any]]) -> _Cancelled | None:
        """Send the transaction: None when it committed, else why it was cancelled. A
        throttled item is a StorageUnavailable. botocore gives the call a ClientRequestToken,
        so its own retries of a timed-out request are idempotent for 10 minutes."""
        with translated_errors():
            try:
                self._db.transact_write_items(TransactItems=items)
                return None
            except ClientError as exc:
                if error_code(exc) != "TransactionCanceledException":
                    raise
                found: Any = exc.response.get("CancellationReasons") or []
                reasons: list[dict[str, Any]] = list(found)
                if len(reasons) != len(items):
                    raise
                if any(r.get("Code") in _THROTTLED for r in reasons):
                    raise StorageUnavailable("the store is throttling; retry with backoff") from exc
                return _Cancelled(reasons, exc)

    def _renew_hint(self, tenant: str, holder: SlotHolder, run_item: dict[str, Any] | None) -> None:
        """The holder is alive (its lease renewed, or its effect still running): move the
        slot's hint to the later of its lease and its effect record's end, so claimers do not
        check this holder again before it can have ended. Best effort."""
        data = from_item(run_item) if run_item else {}
        ends = [data.get("lease_expires_at")]
        if data.get("effect_fence") == holder.fence:  # another claim's record is not this holder's
            ends.append(data.get("effect_until"))
        known = [end for end in ends if isinstance(end, str)]
        if known:
            self._raise_hint(tenant, holder, max(known))

    def _raise_hint(self, tenant: str, holder: SlotHolder, until: str) -> None:
        """Set the slot's hint to `until` if the holder still holds it and the hint is earlier."""
        try:
            with translated_errors():
                retry_conflicts(
                    lambda: self._db.update_item(
                        TableName=self._table,
                        Key=slot_key(tenant, holder.index),
                        UpdateExpression="SET #lu = :until",
                        ConditionExpression=f"{_HOLDER_MATCHES} AND #lu < :until",
                        ExpressionAttributeNames={**_HOLDER_NAMES, "#lu": "lease_until"},
                        ExpressionAttributeValues={**holder.matches(), **to_item({":until": until})},
                    )
                )
        except (ClientError, StorageUnavailable):
            pass  # another claimer renewed it, the slot moved on, or the store is busy

    def _settle_past_limit(self, tenant: str, holders: list[SlotHolder], now: datetime) -> bool:
        """After the limit was lowered: delete the slots whose holder is dead (below the limit
        too, to make room), and move each live one past the limit into an absent slot below
        it (its holder keeps it; only the index changes). True when anything changed.

        Exact because nothing creates a slot past the limit any more: a claim made while none
        is present can only find, at its commit, the `limit` slots below it."""
        cutoff = now - self.steal_after
        changed = False
        left: list[SlotHolder] = []
        for holder in holders:
            if holder.worth_checking(cutoff) and self._reap(tenant, holder, now):
                changed = True
            else:
                left.append(holder)
        absent = [i for i in range(self.limit) if i not in {h.index for h in left}]
        self._random.shuffle(absent)
        for holder in (h for h in left if h.index >= self.limit):
            if not absent:
                break
            changed |= self._move(tenant, holder, absent.pop())
        return changed

    def _reap(self, tenant: str, holder: SlotHolder, now: datetime) -> bool:
        """Delete the slot if its holder is dead (as a takeover would judge it)."""
        delete = {
            "TableName": self._table,
            "Key": slot_key(tenant, holder.index),
            "ConditionExpression": _HOLDER_MATCHES,
            "ExpressionAttributeNames": _HOLDER_NAMES,
            "ExpressionAttributeValues": holder.matches(),
        }
        check = self._holder_dead(holder, now)
        cancelled = self._transact([{"Delete": delete}, {"ConditionCheck": check}])
        if cancelled is None:
            return True
        if cancelled.code(1) == "ConditionalCheckFailed":
            self._renew_hint(tenant, holder, cancelled.item(1))
        return False

    def _move(self, tenant: str, holder: SlotHolder, to: int) -> bool:
        """Move a holder's slot to the absent index `to`, in one transaction (its `release`
        finds it there)."""
        delete = {
            "TableName": self._table,
            "Key": slot_key(tenant, holder.index),
            "ConditionExpression": _HOLDER_MATCHES,
            "ExpressionAttributeNames": _HOLDER_NAMES,
            "ExpressionAttributeValues": holder.matches(),
        }
        put = {
            "TableName": self._table,
            "Item": replace(holder, index=to).item(tenant),
            "ConditionExpression": "attribute_not_exists(job_id)",
        }
        return self._transact([{"Delete": delete}, {"Put": put}]) is None

    # --- releasing ---

    def release(self, run: Run) -> bool:
        """Free the slot `run`'s claim took. Best effort: True if this call freed it.

        Takes the run as written by the transition that took it out of LEASED under the
        claim's fence (a completion, a failure, a hold, `in_progress_elsewhere`, the
        reconciler's `lease_expired`, a cancel), or any later version with that fence.
        Call it after each of those; a run without a slot (`tenant_slot` None) costs nothing.
        A run whose claim's effect record is still open (its `updated_at` before the record's
        end: the attempt stopped waiting for its effect, or its lease expired under it) keeps
        its slot: the hint moves to the record's end (one conditional UpdateItem) and
        `release_effect` frees it when the effect ends.
        Otherwise costs one conditional DeleteItem; when the slot is no longer where the claim put it
        (moved below a lowered limit, taken over, released already), also a Query of the
        tenant's slots to find it.
        Raises ValueError for a run still LEASED: its slot is still held.
        Never raises for a lost race or an unavailable store (it logs those): a slot whose
        release is lost is taken over once its hint has expired, so the cost of a lost
        release is one slot left unused for up to its lease (or its kept record's end)."""
        if run.tenant_slot is None:
            return False
        if run.state is RunState.LEASED:
            raise ValueError(f"run {run.run_key} is still LEASED: its slot is held")
        mine = SlotHolder(run.tenant_slot, run.job_id, key_sk(run.run_key), run.fence, run.updated_at)
        if _effect_open(run, run.fence, run.updated_at):
            # The claim's effect may still be running (the attempt stopped waiting for it, or
            # its lease expired under it): the slot stays its until `release_effect`, or until
            # the record's end, when a claimer's check finds it over (the hint, like a
            # lease's, is the end itself: claimers allow `steal_after` on top).
            assert run.effect_until is not None
            self._raise_hint(run.tenant, mine, format_instant(run.effect_until))
            return False
        try:
            if self._delete(run.tenant, mine):
                return True
            moved = [h for h in self.holders(run.tenant) if h.is_run(run) and h.fence == run.fence]
            return any([self._delete(run.tenant, h) for h in moved])
        except StorageUnavailable as exc:
            logger.warning("tenant slot not released", extra={"run_key": run.run_key, "error": str(exc)})
            return False

    def release_effect(self, run: Run, fence: int) -> bool:
        """Free the slot the claim with `fence` kept for its effect (see `release`), now that
        the effect has ended and its result is saved on `run`. Best effort: True if this call
        freed it; a slot not freed here is free once its hint (the record's end) has passed.
        Costs a Query of the tenant's slots and, if one is found, a conditional DeleteItem.
        Frees nothing while `run` is still LEASED under `fence` (that slot is the lease's)."""
        if run.state is RunState.LEASED and run.fence == fence:
            return False
        try:
            kept = [h for h in self.holders(run.tenant) if h.is_run(run) and h.fence == fence]
            return any([self._delete(run.tenant, h) for h in kept])
        except StorageUnavailable as exc:
            logger.warning("tenant slot not released", extra={"run_key": run.run_key, "error": str(exc)})
            return False

    def _delete(self, tenant: str, holder: SlotHolder) -> bool:
        """Delete the slot if `holder` still holds it; False if it does not."""
        try:
            with translated_errors():
                retry_conflicts(
                    lambda: self._db.delete_item(
                        TableName=self._table,
                        Key=slot_key(tenant, holder.index),
                        ConditionExpression=_HOLDER_MATCHES,
                        ExpressionAttributeNames=_HOLDER_NAMES,
                        ExpressionAttributeValues=holder.matches(),
                    )
                )
        except ClientError as exc:
            if error_code(exc) == "ConditionalCheckFailedException":
                return False
            raise
        return True

    # --- reading ---

    def holders(self, tenant: str) -> list[SlotHolder]:
        """The tenant's present slot items, read consistently (live or not: see SlotHolder)."""
        request: dict[str, Any] = {
            "TableName": self._table,
            "KeyConditionExpression": "job_id = :p",
            "ExpressionAttributeValues": to_item({":p": slot_partition(tenant)}),
            "ConsistentRead": True,
        }
        found: list[SlotHolder] = []
        while True:
            with translated_errors():
                response = self._db.query(**request)
            found += [h for h in map(_holder, response.get("Items", [])) if h is not None]
            if not (last := response.get("LastEvaluatedKey")):
                return found
            request["ExclusiveStartKey"] = last


def _effect_open(run: Run, fence: int, now: datetime) -> bool:
    """Whether `run`, as read, has the claim with `fence`'s effect record still open at `now`."""
    end = excluded_until(run) if run.effect_fence == fence else None
    return end is not None and now < end


def _holder(item: dict[str, Any]) -> SlotHolder | None:
    data = from_item(item)
    try:
        return SlotHolder(
            int(str(data["sk"]).removeprefix(SLOT_SK_PREFIX)),
            str(data["run_job"]),
            str(data["run_sk"]),
            int(data["run_fence"]),
            parse_instant(str(data["lease_until"])),
        )
    except (KeyError, ValueError, TypeError):
        # Not a slot this version writes. Left out, its index looks absent, and a claim's
        # `attribute_not_exists` condition on it refuses to take it: never counted as free.
        logger.error("unreadable tenant slot", extra={"sk": data.get("sk")})
        return None
