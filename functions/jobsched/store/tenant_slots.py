"""TENANT_CONCURRENCY made exact: a claim takes one of its tenant's slots before it claims
the run, and a claim that lands after its slot was taken over holds a lease already over,
so no number of concurrent claimers, and no index lag, can put more than `limit` of a
tenant's runs under live leases (or with effects still running: see "held" below) at once.

A tenant has `limit` slots, items of the Runs table:

    job_id = "slots#" + sha256(tenant)   sk = "S#<index>", 0 <= index < limit
    run_job, run_sk, run_fence           the holder: the run (its key) and the claim's fence
    run_token                            that claim's token (`Run.claim_token`)
    lease_until                          the lease that claim writes (a hint, see below)

A slot is **held** while its holder run is LEASED under `run_fence` with a lease still live,
or while the in-progress record of that claim's effect (`effect_fence = run_fence`, until
`effect_until`, the claiming invocation's deadline) is open: an attempt that stopped waiting
for its effect at its timeout, or whose lease expired under it, leaves the effect running,
and it counts until it has ended (its result saved) or its invocation has. Otherwise the
slot is free, whether its item is absent (released) or not (a release was lost, the holder
died, its claim never landed). Liveness is the run item's, never the slot's: the hint
`lease_until` only says when a holder is worth checking (a heartbeat extends the run's
lease, not the hint; a release that keeps the slot for a running effect moves the hint to
the record's end).

A claim is two conditional Puts, in this order (`TenantSlots._take`):
  1. the slot's: on an absent slot, or over the holder it was read with, once that holder
     is judged over (`_holder_over`: its run item, read strongly consistently, shows no
     live lease and no open effect record under the holder's fence as of now -
     `steal_after`: a lease is taken over only once it has been expired for that long, so
     a holder whose clock lags by less cannot renew it in between). A holder is only
     judged once its hint has passed by `steal_after`, so a claim that has not landed yet
     (its run still shows an earlier fence) is judged over only when the lease it will
     write has been over that long. A slot an earlier claim of the same run holds is
     judged the same way, and taken only then: its holder, whose clock may lag, may renew
     its lease until then;
  2. the run's claim, `RunStore.commit`'s conditional Put (rev and state as read), the run
     carrying `tenant_slot = index` and a lease ending at the slot's hint.
A claim refused by the run (another writer got there first) deletes the slot it took (on
its token too, so it never deletes another claim's): a slot that was absent, or whose
holder was over, so no live claim loses one. A crash between the two, or a refused
delete, leaves a slot naming a claim that never landed: judged over once its hint has
passed by `steal_after`. A claim that lands later than that holds a lease already over, so
its effect never starts and its lease is never handed out (the claimer checks the lease is
live before either) nor renewed.

What keeps a slot's count exact: a holder's lease is only ever extended while it is live
(`RunStore.extend_lease(..., live_at=now)`, required for a run with a `tenant_slot`), so a
holder judged over stays over; a claim under a fence lands at most once (a rev as read is
written once), so a live lease is named by the one slot its claim took; and an effect record
is opened only under a live lease. (A claim that never landed may leave a slot naming a
fence its run never gets: that slot counts nothing live, and lapses once its hint passes.)

Why the Runs table and this key: the roles that claim runs already write that table, and a
lowered limit's move (a Delete and a Put in one transaction) stays in it. No index picks a
slot item up (none of its attributes is a key of `open`, `dead_by_tenant`, `claimable` or
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
partition (the slots held now, ~190 bytes each: 1 read unit up to ~20 held, 3 at 50), the
slot's Put (1 write unit) and the run's (1 per KB, as a claim without a limit pays); a
takeover adds one strongly consistent read of the holder's run (1 read unit); per release
one DeleteItem (1 write unit), or, for an effect still running, one UpdateItem of the hint
and the DeleteItem when it ends. A run back from waiting for a slot looks first (the
worker: `holders`, then `at_limit`, before it reads the run): a look that finds every slot
held costs that one Query instead of the run's read and the Query, and a look that finds
one free hands what it read to `claim`. Every claim and release of one tenant writes the
same partition key: 2 write units a run, so one tenant's claims top out near 500 a second
on one partition's 1,000 WCU/s unless DynamoDB splits it for heat.
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
# Slots a claim tries before it gives up on a tenant whose slots keep changing.
CLAIM_ATTEMPTS = 8
# A holder's lease is taken over only this long after it expired (see the module docstring).
# Two clocks may differ by twice domain.effects.MAX_CLOCK_SKEW: a holder whose clock lags by
# less can no longer renew a lease judged expired this long ago.
STEAL_AFTER = 2 * MAX_CLOCK_SKEW
# Cancellation reasons that mean "the store is throttling" (a lowered limit's moves).
_THROTTLED = {"ThrottlingError", "ProvisionedThroughputExceeded", "RequestLimitExceeded"}
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
    # The claim's own token (`Run.claim_token`): two claims of one run from one read share
    # everything else. None on a slot an earlier version wrote, and on a release's own view.
    token: str | None = None

    @classmethod
    def of(cls, run: Run, index: int) -> SlotHolder:
        """The holder a claim of `run` (as written, LEASED) records in slot `index`."""
        assert run.lease_expires_at is not None
        return cls(index, run.job_id, key_sk(run.run_key), run.fence, run.lease_expires_at, run.claim_token)

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
                    **({"run_token": self.token} if self.token is not None else {}),
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

    def condition(self) -> tuple[str, dict[str, str], dict[str, Any]]:
        """A write's condition that the slot still holds this holder: its run and fence, and
        its claim's token when it names one. (ConditionExpression, names, values.)"""
        if self.token is None:
            return _HOLDER_MATCHES, dict(_HOLDER_NAMES), self.matches()
        return (
            _HOLDER_MATCHES + " AND #rt = :rt",
            {**_HOLDER_NAMES, "#rt": "run_token"},
            {**self.matches(), **to_item({":rt": self.token})},
        )

    def run_key(self) -> dict[str, Any]:
        return to_item({"job_id": self.run_job, "sk": self.run_sk})


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
        stored run is still `read` and one of the tenant's slots is free: the slot's
        conditional Put, then the run's (`_take`).

        Takes: the run as read, the claim transition (e.g. `lifecycle.claim(...)` bound to
        its arguments), the claimer's clock `now` (a holder's lease counts as expired
        once `now - steal_after` has passed it), and optionally the tenant's `holders` as
        the caller read them just before: the first try then chooses from those instead of
        reading them again. A slot taken since is refused by its conditional Put and the
        next try reads them afresh; a slot freed since is not seen (holders that leave no slot to
        try raise TenantAtLimit at once, as a read made then would have).
        Returns: the run as written, with `tenant_slot` set (None when the limit is 0).
        Raises:
          - ValueError: `change` does not leave the run LEASED with a lease and a claim token.
          - TenantAtLimit: every slot is held by a live lease (or the slots kept changing
            under `attempts` tries): nothing was written; try again later.
          - RunChanged (with the stored run, None if absent): the run is not as read, as
            `RunStore.commit` raises; the run was not written, and the slot taken for it
            is deleted (best effort: see `_take`).
          - TransitionRefused from `change`; StorageUnavailable when the store throttles.
        Guarantees: at no instant do more than `limit` of the tenant's claims made through
        here hold a live lease or an open effect record (see the module docstring for a
        lowered limit).
        The caller must: start no effect and hand out no lease unless the lease is live by
        its clock (a claim can land after its own lease has ended, its slot taken over
        since); extend the lease only with `RunStore.extend_lease(run, until,
        live_at=now)`; and call `release` with the run as written by the transition that
        takes it out of LEASED."""
        if self.limit == 0:  # no slot: one a run kept from an earlier claim is not its own
            return self._runs.commit(read, lambda r: change(r).model_copy(update={"tenant_slot": None}))
        leased = change(read)
        if leased.state is not RunState.LEASED or leased.lease_expires_at is None:
            raise ValueError(f"run {read.run_key}: a claim must leave the run LEASED with a lease")
        if leased.claim_token is None:
            raise ValueError(f"run {read.run_key}: a claim under a tenant limit must carry its token")
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
                take = self._choose(holders, now)
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

    def at_limit(self, holders: list[SlotHolder], *, now: datetime) -> bool:
        """Whether a claim at `now`, given the tenant's `holders` as just read, would find no
        slot to try and raise TenantAtLimit before any write: every slot below the limit is
        present, none lies past it (a lowered limit: the claim settles those), and none is
        worth checking (its hint expired by `now - steal_after`: its holder may be over).
        Pure. False says only that a claim must decide: the slots' holders may be live.
        With the limit 0: False (no limit)."""
        if self.limit == 0:
            return False
        cutoff = now - self.steal_after
        below = {h.index for h in holders if 0 <= h.index < self.limit}
        return (
            len(below) == self.limit
            and all(0 <= h.index < self.limit for h in holders)
            and not any(h.worth_checking(cutoff) for h in holders)
        )

    def _choose(self, holders: list[SlotHolder], now: datetime) -> _Take | None:
        """The slot to try: a random absent one (concurrent claimers spread out), else a random
        one whose holder may be over (its hint expired by `now - steal_after`), to be judged
        from its run item. A slot an earlier claim of the same run holds is no different:
        until then its holder may still renew its lease (its clock may lag), and a claim of
        the run that never landed names a fence the run does not have."""
        absent = [i for i in range(self.limit) if i not in {h.index for h in holders}]
        if absent:
            return _Take(self._random.choice(absent), None)
        cutoff = now - self.steal_after
        stale = [h for h in holders if h.worth_checking(cutoff)]
        return _Take((h := self._random.choice(stale)).index, h) if stale else None

    def _take(self, take: _Take, read: Run, leased: Run, now: datetime) -> Run | None:
        """Take the slot, then claim the run: the run as written, or None to try another slot.

        The slot's conditional Put comes first: on an absent slot, or over the holder as read
        once `_holder_over` judged it over. The run's claim is then the plain conditional Put
        `RunStore.commit` makes, its lease ending at the slot's hint. A claim refused by the
        run (RunChanged) deletes the slot it just took (on its token) and raises: the slot it
        took was absent or its holder over, so no live claim loses a slot. Any other failure
        after the slot's Put leaves it, naming a claim that may or may not have landed: one
        that did not is judged over once its hint and `steal_after` have passed, and one that
        landed that late holds a lease already over, which starts no effect (the caller's
        contract)."""
        slotted = leased.model_copy(update={"tenant_slot": take.index})
        mine = SlotHolder.of(slotted, take.index)
        if take.over is not None and not self._holder_over(read.tenant, take.over, now):
            return None  # the holder is live: look elsewhere
        if not self._put_slot(read.tenant, mine, take.over):
            return None  # the slot went to another claimer
        try:
            return self._runs.commit(read, lambda _: slotted, holder=False)
        except RunChanged:
            self._drop(read.tenant, mine)
            raise

    def _put_slot(self, tenant: str, mine: SlotHolder, over: SlotHolder | None) -> bool:
        """Write `mine` into its slot if the slot is absent (`over` None) or still holds `over`.
        False when it does not; a refusal that finds `mine` already there (the SDK re-sent a
        Put the table had applied) is success."""
        request: dict[str, Any] = {
            "TableName": self._table,
            "Item": mine.item(tenant),
            "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
        }
        if over is None:
            request["ConditionExpression"] = "attribute_not_exists(job_id)"
        else:
            (
                request["ConditionExpression"],
                request["ExpressionAttributeNames"],
                request["ExpressionAttributeValues"],
            ) = over.condition()
        with translated_errors():
            try:
                retry_conflicts(lambda: self._db.put_item(**request))
            except ClientError as exc:
                if error_code(exc) != "ConditionalCheckFailedException":
                    raise
                stored: Any = exc.response.get("Item")
                return bool(stored) and _holder(stored) == mine
        return True

    def _drop(self, tenant: str, mine: SlotHolder) -> None:
        """Best effort: delete the slot a claim took for a run write that was refused. One
        left (the store refused this too) is judged over after its hint and `steal_after`."""
        try:
            self._delete(tenant, mine)
        except StorageUnavailable as exc:
            logger.warning("tenant slot of a refused claim not deleted", extra={"error": str(exc)})

    def _holder_over(self, tenant: str, holder: SlotHolder, now: datetime) -> bool:
        """Whether the claim `holder` names no longer counts, judged from its run item read
        strongly consistently at `now`: over unless the run is LEASED under the holder's fence
        with a lease ending after `now - steal_after`, or holds that claim's effect record open
        after then. A run with no item, claimed since under another fence (through another
        slot), or whose claim under this fence never landed (it is only judged once its hint,
        the lease it would write, has passed by `steal_after`; or its fence landed under
        another claim's token) is over for this slot. A live holder's lease or record end
        becomes the slot's hint (`_renew_hint`), so claimers do not read it again before it
        can have ended.

        Sound as the judgement stays true: a lease is only extended while live
        (`RunStore.extend_lease(..., live_at=now)`), a claim under a fence lands at most once,
        and an effect record is only opened under a live lease."""
        with translated_errors():
            item = self._db.get_item(TableName=self._table, Key=holder.run_key(), ConsistentRead=True).get(
                "Item"
            )
        if not item:
            return True
        run = RunStore.from_item(item)
        if run.fence == holder.fence and holder.token is not None and run.claim_token != holder.token:
            return True  # its fence was claimed by another claim (a twin from the same read)
        cutoff = now - self.steal_after
        leased = (
            run.state is RunState.LEASED
            and run.fence == holder.fence
            and run.lease_expires_at is not None
            and run.lease_expires_at > cutoff
        )
        recording = (
            run.effect_fence == holder.fence and run.effect_until is not None and run.effect_until > cutoff
        )
        if leased or recording:
            self._renew_hint(tenant, holder, run)
            return False
        return True

    def _transact(self, items: list[dict[str, Any]]) -> bool:
        """Send the transaction: True when it committed, False when it was cancelled (a
        condition failed, or a conflict). A throttled item is a StorageUnavailable.
        botocore gives the call a ClientRequestToken, so its own retries of a timed-out
        request are idempotent for 10 minutes."""
        with translated_errors():
            try:
                self._db.transact_write_items(TransactItems=items)
                return True
            except ClientError as exc:
                if error_code(exc) != "TransactionCanceledException":
                    raise
                found: Any = exc.response.get("CancellationReasons") or []
                if any(r.get("Code") in _THROTTLED for r in found):
                    raise StorageUnavailable("the store is throttling; retry with backoff") from exc
                return False

    def _renew_hint(self, tenant: str, holder: SlotHolder, run: Run) -> None:
        """The holder is live (its lease renewed, or its effect still running): move the
        slot's hint to the later of its lease and its effect record's end, so claimers do not
        check this holder again before it can have ended. Best effort."""
        ends = [run.lease_expires_at]
        if run.effect_fence == holder.fence:  # another claim's record is not this holder's
            ends.append(run.effect_until)
        known = [end for end in ends if end is not None]
        if known:
            self._raise_hint(tenant, holder, format_instant(max(known)))

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
        """Delete the slot if its holder is over (as a takeover judges it: `_holder_over`)
        and still holds it."""
        return self._holder_over(tenant, holder, now) and self._delete(tenant, holder)

    def _move(self, tenant: str, holder: SlotHolder, to: int) -> bool:
        """Move a holder's slot to the absent index `to`, in one transaction (its `release`
        finds it there)."""
        condition, names, values = holder.condition()
        delete = {
            "TableName": self._table,
            "Key": slot_key(tenant, holder.index),
            "ConditionExpression": condition,
            "ExpressionAttributeNames": names,
            "ExpressionAttributeValues": values,
        }
        put = {
            "TableName": self._table,
            "Item": replace(holder, index=to).item(tenant),
            "ConditionExpression": "attribute_not_exists(job_id)",
        }
        return self._transact([{"Delete": delete}, {"Put": put}])

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
        """Delete the slot if `holder` still holds it (its claim's token too, when `holder`
        names one); False if it does not."""
        condition, names, values = holder.condition()
        try:
            with translated_errors():
                retry_conflicts(
                    lambda: self._db.delete_item(
                        TableName=self._table,
                        Key=slot_key(tenant, holder.index),
                        ConditionExpression=condition,
                        ExpressionAttributeNames=names,
                        ExpressionAttributeValues=values,
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
            str(data["run_token"]) if "run_token" in data else None,
        )
    except (KeyError, ValueError, TypeError):
        # Not a slot this version writes. Left out, its index looks absent, and a claim's
        # `attribute_not_exists` condition on it refuses to take it: never counted as free.
        logger.error("unreadable tenant slot", extra={"sk": data.get("sk")})
        return None
