"""The tenant concurrency limit as slot items taken before the run's claim, on moto: never
more live leases than the limit, whatever the interleaving, a frozen holder, a claim landing
late, a crash between the two writes, a lost release, a limit change or a hostile tenant id
(store.tenant_slots)."""

from __future__ import annotations

import secrets
import threading
from datetime import datetime, timedelta
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError
from jobsched.domain import lifecycle
from jobsched.domain.errors import StorageUnavailable, TenantAtLimit
from jobsched.domain.instants import format_instant
from jobsched.domain.runs import Run, RunState, created
from jobsched.handlers.outbox import matches_filter
from jobsched.store.runs import RunChanged, RunStore
from jobsched.store.schema import RUNS
from jobsched.store.tenant_slots import STEAL_AFTER, TenantSlots, slot_partition

from tests.helpers import T0

pytestmark = pytest.mark.integration

LEASE = 60
TENANT = "tenant-a"


# --- building runs and claims ---


def make_run(job_id: str, *, tenant: str = TENANT, at: datetime = T0) -> Run:
    return created(
        Run(
            run_key=f"{job_id}@{format_instant(at)}",
            job_id=job_id,
            tenant=tenant,
            job_type="ext",
            scheduled_for=at,
            due_at=at,
            state=RunState.QUEUED,
            definition_version=1,
            created_at=at,
            updated_at=at,
        ),
        actor="test",
    )


def insert(runs: RunStore, *keys: str, tenant: str = TENANT) -> list[Run]:
    made = [make_run(key, tenant=tenant) for key in keys]
    for run in made:
        assert runs.insert(run)
    return made


def claim_change(now: datetime, owner: str = "w"):
    token = secrets.token_hex(8)  # one per claim, as services.attempt draws it
    return lambda r: lifecycle.claim(
        r, now=now, owner=owner, actor=f"worker:{owner}", lease_seconds=LEASE, token=token
    )


def claim(slots: TenantSlots, run: Run, now: datetime, owner: str = "w") -> Run:
    return slots.claim(run, claim_change(now, owner), now=now)


def finish(runs: RunStore, slots: TenantSlots | None, leased: Run, now: datetime) -> Run:
    """The holder's completion, then (unless `slots` is None: a lost release) the release."""
    done = runs.commit(leased, lambda r: lifecycle.succeed(r, now=now, actor="w", result=None), holder=True)
    if slots is not None:
        slots.release(done)
    return done


def live_leases(client: Any, tenant: str, now: datetime) -> list[Run]:
    """The tenant's runs under a live lease, read from the run items themselves (no index)."""
    items = client.scan(TableName=RUNS.default_name)["Items"]
    runs = [RunStore.from_item(i) for i in items if i["sk"]["S"].startswith("R#")]
    return [r for r in runs if r.tenant == tenant and r.lease_live(now)]


def slot_items(client: Any, tenant: str) -> list[dict[str, Any]]:
    response = client.query(
        TableName=RUNS.default_name,
        KeyConditionExpression="job_id = :p",
        ExpressionAttributeValues={":p": {"S": slot_partition(tenant)}},
        ConsistentRead=True,
    )
    return response["Items"]


@pytest.fixture
def ddb(aws):
    return boto3.client("dynamodb")


@pytest.fixture
def runs(ddb):
    return RunStore(ddb, RUNS.default_name, 4)


# --- exactness under concurrency ---


class WatchingClient:
    """Calls reach moto one at a time (moto is not thread-safe; threads still interleave
    between calls, where the races live), and after each write, under the same lock, the
    tenant's live leases are counted from the run items: the highest count at any instant."""

    def __init__(self, inner: Any, tenant: str, now: datetime) -> None:
        self._inner = inner
        self._lock = threading.Lock()
        self._watched = (tenant, now)
        self.highest = 0

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        if not callable(attr):
            return attr
        writes = name in ("put_item", "update_item", "delete_item", "transact_write_items")

        def call(*args: Any, **kwargs: Any) -> Any:
            with self._lock:
                try:
                    return attr(*args, **kwargs)
                finally:
                    if writes:
                        live = len(live_leases(self._inner, *self._watched))
                        self.highest = max(self.highest, live)

        return call


def test_threads_claiming_one_tenants_runs_at_once_never_exceed_the_limit(ddb):
    watching = WatchingClient(ddb, TENANT, T0)
    runs = RunStore(watching, RUNS.default_name, 4)
    slots = TenantSlots(runs, 3)
    pending = insert(runs, *(f"j_t{i}" for i in range(16)))
    outcomes: list[str] = []
    start = threading.Barrier(8)

    def claimer(mine: list[Run]) -> None:
        start.wait()
        for run in mine:
            try:
                claim(slots, run, T0, owner=threading.current_thread().name)
                outcomes.append("leased")
            except TenantAtLimit:
                outcomes.append("at_limit")

    threads = [threading.Thread(target=claimer, args=(pending[i::8],)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert outcomes.count("leased") == 3
    assert outcomes.count("at_limit") == 13
    assert watching.highest == 3
    assert len(live_leases(ddb, TENANT, T0)) == 3
    assert len(slot_items(ddb, TENANT)) == 3


def test_threads_claiming_and_finishing_keep_every_instant_within_the_limit(ddb):
    watching = WatchingClient(ddb, TENANT, T0)
    runs = RunStore(watching, RUNS.default_name, 4)
    slots = TenantSlots(runs, 2)
    queue = insert(runs, *(f"j_c{i}" for i in range(12)))
    lock = threading.Lock()
    finished: list[str] = []

    def worker() -> None:
        while True:
            with lock:
                if not queue:
                    return
                run = queue.pop()
            try:
                leased = claim(slots, run, T0, owner=threading.current_thread().name)
            except TenantAtLimit:
                with lock:
                    queue.insert(0, run)  # try it again later, as a deferral would
                continue
            finish(runs, slots, leased, T0)
            finished.append(run.run_key)

    threads = [threading.Thread(target=worker) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert len(finished) == 12
    assert watching.highest <= 2
    assert slot_items(ddb, TENANT) == []  # every slot released


# --- a holder frozen past its lease ---


def test_a_holder_frozen_past_its_lease_loses_its_slot_and_cannot_renew_it(runs, ddb):
    slots = TenantSlots(runs, 1)
    first, second = insert(runs, "j_f1", "j_f2")
    frozen = claim(slots, first, T0)

    expired = T0 + timedelta(seconds=LEASE)
    with pytest.raises(TenantAtLimit):
        claim(slots, second, expired)  # expired, but not for `steal_after` yet
    later = expired + STEAL_AFTER
    taken = claim(slots, second, later)
    assert taken.tenant_slot == frozen.tenant_slot == 0

    # The holder wakes up: its lease cannot be made live again beside the run that took its slot.
    with pytest.raises(RunChanged, match="lease expired"):
        runs.extend_lease(frozen, later + timedelta(seconds=LEASE), live_at=later)
    done = finish(runs, slots, frozen, later)  # its completion still lands (its fence is current)
    assert done.state is RunState.SUCCEEDED
    assert not slots.release(done)  # and frees nothing: the slot is the other run's now
    assert [r.run_key for r in live_leases(ddb, TENANT, later)] == [taken.run_key]
    assert slot_items(ddb, TENANT)[0]["run_job"]["S"] == "j_f2"


def test_a_slotted_lease_is_extended_only_with_the_holders_clock(runs):
    slots = TenantSlots(runs, 1)
    (run,) = insert(runs, "j_clock")
    leased = claim(slots, run, T0)
    with pytest.raises(ValueError, match="live_at"):
        runs.extend_lease(leased, T0 + timedelta(seconds=2 * LEASE))
    renewed = runs.extend_lease(leased, T0 + timedelta(seconds=2 * LEASE), live_at=T0 + timedelta(seconds=30))
    assert renewed.lease_expires_at == T0 + timedelta(seconds=2 * LEASE)


def test_a_renewed_holder_keeps_its_slot_and_the_hint_follows_its_lease(runs, ddb):
    slots = TenantSlots(runs, 1)
    first, second = insert(runs, "j_r1", "j_r2")
    holder = claim(slots, first, T0)
    runs.extend_lease(holder, T0 + timedelta(seconds=120), live_at=T0 + timedelta(seconds=30))

    at = T0 + timedelta(seconds=LEASE) + STEAL_AFTER  # the slot's hint says "check me"
    with pytest.raises(TenantAtLimit):
        claim(slots, second, at)  # the check finds the lease renewed
    assert slot_items(ddb, TENANT)[0]["lease_until"]["S"] == format_instant(T0 + timedelta(seconds=120))
    assert claim(slots, second, T0 + timedelta(seconds=120) + STEAL_AFTER).tenant_slot == 0


# --- a lost release ---


def test_a_lost_release_leaves_the_slot_unused_only_until_its_lease_would_have_ended(runs, ddb):
    slots = TenantSlots(runs, 1)
    first, second = insert(runs, "j_l1", "j_l2")
    finish(runs, None, claim(slots, first, T0), T0 + timedelta(seconds=5))  # release lost

    with pytest.raises(TenantAtLimit):
        claim(slots, second, T0 + timedelta(seconds=10))
    taken = claim(slots, second, T0 + timedelta(seconds=LEASE) + STEAL_AFTER)
    assert taken.tenant_slot == 0
    (slot,) = slot_items(ddb, TENANT)
    assert (slot["run_job"]["S"], slot["run_fence"]["N"]) == ("j_l2", "1")


def test_a_run_reclaimed_after_its_lease_expired_waits_for_its_old_slot_like_any_other(runs, ddb):
    """Its earlier claim's slot counts until that lease has been over for `steal_after`: the
    earlier holder, if its clock lags, may renew it until then."""
    slots = TenantSlots(runs, 1)
    (run,) = insert(runs, "j_own")
    first = claim(slots, run, T0)
    with pytest.raises(TenantAtLimit):
        claim(slots, first, T0 + timedelta(seconds=LEASE + 1), owner="w2")
    again = claim(slots, first, T0 + timedelta(seconds=LEASE) + STEAL_AFTER, owner="w2")
    assert (again.fence, again.tenant_slot) == (2, first.tenant_slot)
    (slot,) = slot_items(ddb, TENANT)
    assert slot["run_fence"]["N"] == "2"


def test_a_run_reclaimed_under_a_free_slot_takes_it_and_leaves_its_old_one_to_lapse(runs, ddb):
    slots = TenantSlots(runs, 2)
    (run,) = insert(runs, "j_own2")
    first = claim(slots, run, T0)
    again = claim(slots, first, T0 + timedelta(seconds=LEASE + 1), owner="w2")
    assert again.fence == 2 and again.tenant_slot != first.tenant_slot
    assert sorted(int(i["run_fence"]["N"]) for i in slot_items(ddb, TENANT)) == [1, 2]
    assert [r.run_key for r in live_leases(ddb, TENANT, T0 + timedelta(seconds=LEASE + 1))] == [run.run_key]


def test_a_run_whose_own_claim_never_landed_takes_its_slot_back_once_it_lapses(ddb):
    """A crash between the slot and the run leaves a slot naming a fence the run never got:
    the run's next claim judges it like any other, and takes it once its hint has passed."""
    failing = FailingPuts(ddb, 2, applied=False)
    slots = TenantSlots(RunStore(failing, RUNS.default_name, 4), 1)
    (run,) = insert(RunStore(ddb, RUNS.default_name, 4), "j_torn_own")
    with pytest.raises(ConnectionError):
        claim(slots, run, T0)
    plain = TenantSlots(RunStore(ddb, RUNS.default_name, 4), 1)
    with pytest.raises(TenantAtLimit):
        claim(plain, run, T0 + timedelta(seconds=LEASE - 1))
    taken = claim(plain, run, T0 + timedelta(seconds=LEASE) + STEAL_AFTER)
    assert (taken.fence, taken.tenant_slot) == (1, 0)


def test_a_reclaim_refused_while_the_earlier_claims_effect_runs_keeps_that_slot(ddb):
    """The earlier claim's effect is still running (its record open) when its run is
    cancelled and a reclaim's write is refused: the slot is still that effect's, and no other
    run of the tenant starts beside it."""
    plain = RunStore(ddb, RUNS.default_name, 4)
    slots = TenantSlots(plain, 1)
    run, other = insert(plain, "j_keep1", "j_keep2")
    first = claim(slots, run, T0)
    ends = T0 + timedelta(seconds=600)  # its invocation's deadline
    started = plain.commit(first, lambda r: lifecycle.record_in_progress(r, now=T0, until=ends), holder=True)
    at = T0 + timedelta(seconds=LEASE) + STEAL_AFTER
    cancelled = plain.commit(started, lambda r: lifecycle.cancel(r, now=at, actor="api", reason="cancelled"))
    slots.release(cancelled)  # kept for the running effect
    with pytest.raises((RunChanged, TenantAtLimit)):
        claim(slots, started, at, owner="w2")  # from a read before the cancel
    with pytest.raises(TenantAtLimit):
        claim(slots, other, at)
    assert [i["run_fence"]["N"] for i in slot_items(ddb, TENANT)] == ["1"]


# --- an effect that outlives its attempt ---

RECORD_END = T0 + timedelta(seconds=90)  # the claiming invocation's deadline, after the lease's


def timed_out(runs: RunStore, slots: TenantSlots, run: Run) -> Run:
    """Claim `run`, start its effect (its in-progress record until RECORD_END), and write the
    attempt's failure at its timeout with the effect still running; then release, as the
    completer does."""
    leased = claim(slots, run, T0)
    started = runs.commit(
        leased, lambda r: lifecycle.record_in_progress(r, now=T0, until=RECORD_END), holder=True
    )
    failed = runs.commit(
        started,
        lambda r: lifecycle.fail(
            r,
            now=T0 + timedelta(seconds=30),
            actor="w",
            error_class="Timeout",
            message="still running",
            retryable=True,
            effect_running=True,
        ),
        holder=True,
    )
    assert failed.state is RunState.RETRY_WAIT and failed.effect_fence == leased.fence
    assert not slots.release(failed)  # kept: the effect still runs
    return failed


def test_an_effect_still_running_after_its_attempt_failed_keeps_its_tenant_slot(runs, ddb):
    slots = TenantSlots(runs, 1)
    first, second = insert(runs, "j_e1", "j_e2")
    failed = timed_out(runs, slots, first)
    (slot,) = slot_items(ddb, TENANT)
    assert slot["lease_until"]["S"] == format_instant(RECORD_END)

    for at in (
        T0 + timedelta(seconds=31),
        T0 + timedelta(seconds=LEASE) + STEAL_AFTER,
        RECORD_END + STEAL_AFTER - timedelta(seconds=1),
    ):
        with pytest.raises(TenantAtLimit):
            claim(slots, second, at)  # the lease is gone, but the effect may still be running
    # Not even its own run's retry takes the slot of the effect it would wait for.
    with pytest.raises(TenantAtLimit):
        claim(slots, failed, T0 + timedelta(seconds=LEASE) + STEAL_AFTER, owner="w2")
    # Once the record has surely ended (Lambda ended the invocation), the slot is taken over.
    taken = claim(slots, second, RECORD_END + STEAL_AFTER)
    assert taken.tenant_slot == 0


def test_an_effect_that_ends_with_its_result_saved_frees_its_slot_at_once(runs, ddb):
    slots = TenantSlots(runs, 1)
    first, second = insert(runs, "j_s1", "j_s2")
    failed = timed_out(runs, slots, first)
    at = T0 + timedelta(seconds=40)
    saved = runs.commit(failed, lambda r: lifecycle.save_result(r, now=at, result="late"))
    assert slots.release_effect(saved, failed.fence)
    assert claim(slots, second, at).tenant_slot == 0


def test_a_release_written_after_the_effect_record_ended_frees_the_slot(runs, ddb):
    """The reconciler ends an expired lease long after the invocation's deadline: nothing can
    still be running, so the release deletes the slot instead of keeping it."""
    slots = TenantSlots(runs, 1)
    (run,) = insert(runs, "j_x1")
    leased = claim(slots, run, T0)
    started = runs.commit(
        leased, lambda r: lifecycle.record_in_progress(r, now=T0, until=RECORD_END), holder=True
    )
    later = RECORD_END + STEAL_AFTER
    expired = runs.commit(started, lambda r: lifecycle.lease_expired(r, now=later, actor="reconciler"))
    assert expired.effect_fence == leased.fence  # the record is still on the run, but over
    assert slots.release(expired)
    assert slot_items(ddb, TENANT) == []


def test_the_takeover_check_reads_the_effect_record_from_the_run_item(runs, ddb):
    """A claimer that finds the slot's hint expired (a release that could not move it) still
    cannot take the slot while the holder's run item shows its effect record open."""
    slots = TenantSlots(runs, 1)
    first, second = insert(runs, "j_h1", "j_h2")
    failed = timed_out(runs, slots, first)
    ddb.update_item(  # the hint as the claim wrote it: the lease's end
        TableName=RUNS.default_name,
        Key={"job_id": {"S": slot_partition(TENANT)}, "sk": {"S": "S#0"}},
        UpdateExpression="SET lease_until = :lu",
        ExpressionAttributeValues={":lu": {"S": format_instant(T0 + timedelta(seconds=LEASE))}},
    )
    item = ddb.get_item(TableName=RUNS.default_name, Key=runs._run_key(failed))["Item"]
    assert item["effect_until"]["S"] == format_instant(RECORD_END)
    with pytest.raises(TenantAtLimit):
        claim(slots, second, T0 + timedelta(seconds=LEASE) + STEAL_AFTER)
    # The refused check moved the hint to the record's end.
    assert slot_items(ddb, TENANT)[0]["lease_until"]["S"] == format_instant(RECORD_END)


# --- two writes: a crash between them, a claim landing late, a refusal ---


class OnPut:
    """Passes calls through, except the `at`-th put_item (1-based: a claim's slot is its
    first, the run its second), which `act` makes instead, given the call that sends it."""

    def __init__(self, inner: Any, at: int, act: Any) -> None:
        self._inner = inner
        self.at = at
        self.act = act
        self.puts = 0

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        if name != "put_item":
            return attr

        def put(**kwargs: Any) -> Any:
            self.puts += 1
            if self.puts != self.at:
                return attr(**kwargs)
            return self.act(lambda: attr(**kwargs))

        return put


def FailingPuts(inner: Any, at: int, *, applied: bool) -> OnPut:
    """The `at`-th put dies before it is sent, or after it was applied."""

    def die(send: Any) -> Any:
        if applied:
            send()
            raise ConnectionError("process died before the answer arrived")
        raise ConnectionError("process died before the request left")

    return OnPut(inner, at, die)


def slotted(ddb: Any, tenant: str, now: datetime) -> bool:
    """Every live slotted lease of the tenant is named by exactly one slot item (its claim's
    fence): what makes the count of slots a bound on the live leases."""
    named: dict[tuple[str, int], int] = {}
    for item in slot_items(ddb, tenant):
        key = (item["run_job"]["S"], int(item["run_fence"]["N"]))
        named[key] = named.get(key, 0) + 1
    live = [r for r in live_leases(ddb, tenant, now) if r.tenant_slot is not None]
    return all(named.get((r.job_id, r.fence)) == 1 for r in live)


@pytest.mark.parametrize(
    ("at", "applied", "slots_left", "claimed"),
    [
        (1, False, 0, False),  # dies before the slot's put leaves
        (1, True, 1, False),  # the slot is taken, the run never claimed
        (2, False, 1, False),  # the same, dying before the run's put leaves
        (2, True, 1, True),  # both written, the answer lost
    ],
)
def test_a_crash_between_the_slot_and_the_claim_costs_a_slot_until_its_hint_has_passed(
    ddb, at, applied, slots_left, claimed
):
    failing = FailingPuts(ddb, at, applied=applied)
    runs = RunStore(failing, RUNS.default_name, 4)
    slots = TenantSlots(runs, 1)
    first, second = insert(RunStore(ddb, RUNS.default_name, 4), "j_x1", "j_x2")

    with pytest.raises(ConnectionError):
        claim(slots, first, T0)
    assert len(slot_items(ddb, TENANT)) == slots_left and slotted(ddb, TENANT, T0)
    stored = runs.get_by_key(first.run_key)
    assert stored is not None and (stored.state is RunState.LEASED) is claimed

    plain = TenantSlots(RunStore(ddb, RUNS.default_name, 4), 1)
    if slots_left:  # the claim's slot counts until its lease would have been over
        with pytest.raises(TenantAtLimit):
            claim(plain, second, T0 + timedelta(seconds=LEASE - 1))
    taken = claim(plain, second, T0 + timedelta(seconds=LEASE) + STEAL_AFTER)
    assert taken.tenant_slot == 0 and slotted(ddb, TENANT, T0 + timedelta(seconds=LEASE) + STEAL_AFTER)


def StallingRunPut(inner: Any, meanwhile: Any) -> OnPut:
    """Holds the claim's run put (its second) back while `meanwhile` runs, then sends it: a
    claimer frozen between its two writes."""
    return OnPut(inner, 2, lambda send: (meanwhile(), send())[1])


def test_a_claim_landing_after_its_slot_was_taken_over_holds_a_lease_already_over(ddb):
    plain = RunStore(ddb, RUNS.default_name, 4)
    late, other = insert(plain, "j_late", "j_other")
    after = T0 + timedelta(seconds=LEASE) + STEAL_AFTER
    taken: list[Run] = []
    stalled = RunStore(
        StallingRunPut(ddb, lambda: taken.append(claim(TenantSlots(plain, 1), other, after))),
        RUNS.default_name,
        4,
    )

    landed = claim(TenantSlots(stalled, 1), late, T0)
    assert taken[0].tenant_slot == landed.tenant_slot == 0
    assert landed.state is RunState.LEASED and not landed.lease_live(after)  # its lease is over
    assert [r.run_key for r in live_leases(ddb, TENANT, after)] == [other.run_key]
    (slot,) = slot_items(ddb, TENANT)
    assert slot["run_job"]["S"] == "j_other"
    with pytest.raises(RunChanged, match="lease expired"):  # and can never be made live again
        plain.extend_lease(landed, after + timedelta(seconds=LEASE), live_at=after)


def test_before_its_hint_has_passed_a_slot_whose_claim_has_not_landed_is_never_taken(ddb):
    plain = RunStore(ddb, RUNS.default_name, 4)
    late, other = insert(plain, "j_late2", "j_other2")
    refused: list[type] = []

    def meanwhile() -> None:
        try:
            claim(
                TenantSlots(plain, 1),
                other,
                T0 + timedelta(seconds=LEASE) + STEAL_AFTER - timedelta(seconds=1),
            )
        except TenantAtLimit as exc:
            refused.append(type(exc))

    stalled = RunStore(StallingRunPut(ddb, meanwhile), RUNS.default_name, 4)
    landed = claim(TenantSlots(stalled, 1), late, T0)
    assert refused == [TenantAtLimit]
    assert landed.lease_live(T0 + timedelta(seconds=LEASE - 1))


def test_a_claim_of_a_run_that_changed_leaves_no_slot_and_says_what_is_stored(runs, ddb):
    slots = TenantSlots(runs, 2)
    (run,) = insert(runs, "j_stale")
    moved = runs.commit(run, lambda r: lifecycle.touch(r, now=T0, actor="outbox", reason="republish"))

    with pytest.raises(RunChanged) as refused:
        claim(slots, run, T0)
    assert refused.value.current is not None and refused.value.current.rev == moved.rev
    assert slot_items(ddb, TENANT) == [] and slotted(ddb, TENANT, T0)


def test_two_claims_of_one_run_from_one_read_never_free_each_others_slot(runs, ddb):
    """Same owner, same second, same read, same slot: their slot items differ only by the
    claim's token, so the loser sees the slot is not its own (rather than a re-sent put of
    its own) and never deletes the winner's."""
    slots = TenantSlots(runs, 1)
    (run,) = insert(runs, "j_twice")
    before = slots.holders(TENANT)  # both read the slot absent

    def change(token: str):
        return lambda r: lifecycle.claim(
            r, now=T0, owner="w", actor="worker:w", lease_seconds=LEASE, token=token
        )

    first = slots.claim(run, change("a1"), now=T0, holders=before)  # the winner
    with pytest.raises(TenantAtLimit):
        slots.claim(run, change("b2"), now=T0, holders=before)  # the loser, from the same read
    (slot,) = slot_items(ddb, TENANT)
    assert (slot["run_fence"]["N"], slot["run_token"]["S"]) == ("1", first.claim_token)
    assert slotted(ddb, TENANT, T0)


def test_a_resent_put_that_had_already_been_applied_is_the_claim(ddb):
    """The SDK re-sends a request whose answer was lost; the repeat is refused by our own
    write, for the slot as for the run: still a claim."""

    class Resending:
        def __init__(self, inner: Any) -> None:
            self._inner = inner

        def __getattr__(self, name: str) -> Any:
            attr = getattr(self._inner, name)
            if name != "put_item":
                return attr

            def twice(**kwargs: Any) -> Any:
                attr(**kwargs)
                return attr(**kwargs)

            return twice

    runs = RunStore(Resending(ddb), RUNS.default_name, 4)
    (run,) = insert(RunStore(ddb, RUNS.default_name, 4), "j_resent")
    leased = TenantSlots(runs, 1).claim(run, claim_change(T0), now=T0)
    assert leased.state is RunState.LEASED and slotted(ddb, TENANT, T0)
    assert len(slot_items(ddb, TENANT)) == 1


# --- what DynamoDB may answer that moto does not ---


def ThrottlingPuts(inner: Any, at: int) -> OnPut:
    """Throttles the `at`-th put_item, as DynamoDB does past a partition's or table's rate."""

    def throttle(send: Any) -> Any:
        raise ClientError(
            {"Error": {"Code": "ProvisionedThroughputExceededException", "Message": "slow down"}}, "PutItem"
        )

    return OnPut(inner, at, throttle)


@pytest.mark.parametrize("at", [1, 2])
def test_a_throttled_claim_is_a_storage_error_not_a_full_tenant(ddb, at):
    runs = RunStore(ThrottlingPuts(ddb, at), RUNS.default_name, 4)
    (run,) = insert(RunStore(ddb, RUNS.default_name, 4), f"j_throttled{at}")
    with pytest.raises(StorageUnavailable):
        TenantSlots(runs, 2).claim(run, claim_change(T0), now=T0)
    assert slotted(ddb, TENANT, T0)


class ConflictingWrites:
    """Refuses the first single-item writes with TransactionConflictException, as DynamoDB does
    while a transaction holds the item (botocore does not retry that code)."""

    def __init__(self, inner: Any, conflicts: int) -> None:
        self._inner = inner
        self.conflicts = conflicts

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        if name not in ("put_item", "update_item", "delete_item"):
            return attr

        def write(**kwargs: Any) -> Any:
            if self.conflicts > 0:
                self.conflicts -= 1
                raise ClientError(
                    {"Error": {"Code": "TransactionConflictException", "Message": "ongoing transaction"}},
                    "PutItem",
                )
            return attr(**kwargs)

        return write


def test_a_run_write_that_meets_a_transaction_is_sent_again(ddb):
    plain = RunStore(ddb, RUNS.default_name, 4)
    (run,) = insert(plain, "j_meets")
    runs = RunStore(ConflictingWrites(ddb, 2), RUNS.default_name, 4)
    moved = runs.commit(run, lambda r: lifecycle.touch(r, now=T0, actor="outbox", reason="republish"))
    assert plain.get_by_key(run.run_key) == moved


def test_a_run_write_that_keeps_meeting_transactions_is_a_503(ddb):
    plain = RunStore(ddb, RUNS.default_name, 4)
    (run,) = insert(plain, "j_blocked")
    runs = RunStore(ConflictingWrites(ddb, 99), RUNS.default_name, 4)
    with pytest.raises(StorageUnavailable):
        runs.commit(run, lambda r: lifecycle.touch(r, now=T0, actor="outbox", reason="republish"))


# --- hostile tenant ids ---

HOSTILE = ('a"b\\c#S#0 slots#' + "é✓𝄞" * 40 + "x" * 256)[:256]


def test_a_256_character_hostile_tenant_id_gets_its_own_slots_under_a_fixed_size_key(runs, ddb):
    twin = HOSTILE[:-1] + "y"  # differs in the last character only
    slots = TenantSlots(runs, 1)
    (mine,) = insert(runs, "j_h1", tenant=HOSTILE)
    (theirs,) = insert(runs, "j_h2", tenant=twin)
    assert claim(slots, mine, T0).tenant_slot == 0
    assert claim(slots, theirs, T0).tenant_slot == 0  # another tenant: its own slot 0
    (extra,) = insert(runs, "j_h3", tenant=HOSTILE)
    with pytest.raises(TenantAtLimit):
        claim(slots, extra, T0)
    assert len(slot_partition(HOSTILE)) == len(slot_partition("t")) == 70
    assert slot_partition(HOSTILE) != slot_partition(twin)
    assert len(slot_items(ddb, HOSTILE)) == len(slot_items(ddb, twin)) == 1


def test_slot_items_are_in_no_index_listing_or_stream_filter(runs, ddb):
    slots = TenantSlots(runs, 2)
    (run,) = insert(runs, "j_quiet")
    claim(slots, run, T0)
    (item,) = slot_items(ddb, TENANT)
    index_keys = {k.name for index in RUNS.indexes for k in (index.partition, index.sort) if k}
    assert not index_keys & set(item)
    assert "expires_at" not in item
    record = {"eventName": "INSERT", "dynamodb": {"NewImage": item}}
    assert not matches_filter(record)
    assert runs.list_for_job(item["job_id"]["S"], limit=10, cursor=None).items == []


# --- the limit changing while slots are held ---


# --- a look before the claim: at the limit only when a claim could take no slot ---


def test_a_look_says_full_only_when_the_claim_would_refuse_without_a_write(runs, ddb):
    """Each state of the slots, read as a waiting run's look reads them: where the look says
    the tenant is full, the claim made with those holders raises TenantAtLimit and writes
    nothing; where it does not, a claim decides (and takes a slot in every case but the
    lowered limit's, whose holders are live)."""
    slots = TenantSlots(runs, 2)
    held = [claim(slots, run, T0) for run in insert(runs, "j_l1", "j_l2")]
    (waiting,) = insert(runs, "j_l3")
    soon = T0 + timedelta(seconds=10)
    expired = T0 + timedelta(seconds=LEASE) + STEAL_AFTER

    def look(at: datetime, limit: int = 2) -> bool:
        return TenantSlots(runs, limit).at_limit(slots.holders(TENANT), now=at)

    # Every slot held by another run's live lease: full, and the claim agrees.
    assert look(soon)
    before = slot_items(ddb, TENANT)
    with pytest.raises(TenantAtLimit):
        slots.claim(waiting, claim_change(soon), now=soon, holders=slots.holders(TENANT))
    assert slot_items(ddb, TENANT) == before
    # A slot's lease expired past the takeover margin: its holder may be dead, a claim looks.
    assert not look(expired)
    # The run's own earlier claim holding a slot changes nothing: it counts until it lapses.
    with pytest.raises(TenantAtLimit):
        claim(slots, held[0], T0 + timedelta(seconds=LEASE + 1))
    # A raised limit has absent slots; a lowered one has slots past it, which a claim settles.
    assert not look(soon, limit=3)
    assert not look(soon, limit=1)
    # No limit: nothing to look at.
    assert not TenantSlots(runs, 0).at_limit(slots.holders(TENANT), now=soon)
    finish(runs, slots, held[0], soon)
    assert not look(soon)
    assert claim(slots, waiting, soon).tenant_slot == held[0].tenant_slot


def test_a_claim_given_holders_that_changed_since_reads_them_again(runs, ddb, monkeypatch):
    slots = TenantSlots(runs, 1)
    (first,) = insert(runs, "j_g1")
    read_before = slots.holders(TENANT)  # the one slot absent
    (second,) = insert(runs, "j_g2")
    claim(slots, second, T0)  # taken since that read
    reads = [0]
    real = slots.holders

    def counted(tenant: str) -> Any:
        reads[0] += 1
        return real(tenant)

    monkeypatch.setattr(slots, "holders", counted)
    # The stale read offers slot 0: its conditional put refuses it, the claim reads the slots
    # again and finds the tenant at its limit. Nothing of the first run is written.
    with pytest.raises(TenantAtLimit):
        slots.claim(first, claim_change(T0), now=T0, holders=read_before)
    assert reads[0] == 1
    assert runs.get_by_key(first.run_key) == first
    assert len(live_leases(ddb, TENANT, T0)) == 1


def test_a_lowered_limit_admits_no_claim_until_the_live_leases_are_below_it(runs, ddb):
    held = [claim(TenantSlots(runs, 3), run, T0) for run in insert(runs, "j_d1", "j_d2", "j_d3")]
    (waiting,) = insert(runs, "j_d4")
    lowered = TenantSlots(runs, 1)
    with pytest.raises(TenantAtLimit):
        claim(lowered, waiting, T0)
    for leased in held[:2]:
        finish(runs, lowered, leased, T0)
        with pytest.raises(TenantAtLimit):  # one still live: the limit of 1 is full
            claim(lowered, waiting, T0)
    finish(runs, lowered, held[2], T0)
    assert claim(lowered, waiting, T0).tenant_slot == 0
    assert len(live_leases(ddb, TENANT, T0)) == 1


def test_a_lowered_limit_reaps_a_dead_holder_past_it(runs, ddb):
    held = [claim(TenantSlots(runs, 3), run, T0) for run in insert(runs, "j_p1", "j_p2", "j_p3")]
    (waiting,) = insert(runs, "j_p4")
    lowered = TenantSlots(runs, 1)
    for leased in held:
        finish(runs, None, leased, T0)  # every release lost
    later = T0 + timedelta(seconds=LEASE) + STEAL_AFTER
    assert claim(lowered, waiting, later).tenant_slot == 0
    assert [i["sk"]["S"] for i in slot_items(ddb, TENANT)] == ["S#0"]


def test_a_raised_limit_frees_new_slots_at_once(runs, ddb):
    first, second, third = insert(runs, "j_u1", "j_u2", "j_u3")
    claim(TenantSlots(runs, 1), first, T0)
    with pytest.raises(TenantAtLimit):
        claim(TenantSlots(runs, 1), second, T0)
    raised = TenantSlots(runs, 3)
    claim(raised, second, T0)
    claim(raised, third, T0)
    assert len(live_leases(ddb, TENANT, T0)) == 3


class CountingClient:
    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.calls: list[str] = []

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        if not callable(attr):
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            self.calls.append(name)
            return attr(*args, **kwargs)

        return call


def test_a_claim_under_no_limit_drops_the_slot_an_earlier_claim_took(runs, ddb):
    (run,) = insert(runs, "j_unlimited")
    slotted = claim(TenantSlots(runs, 1), run, T0)
    again = claim(TenantSlots(runs, 0), slotted, T0 + timedelta(seconds=LEASE + 1))
    assert again.tenant_slot is None
    runs.extend_lease(again, T0 + timedelta(seconds=2 * LEASE))  # no slot: no live_at needed


def test_limit_zero_is_no_limit_and_writes_no_slot(ddb):
    counting = CountingClient(ddb)
    runs = RunStore(counting, RUNS.default_name, 4)
    slots = TenantSlots(runs, 0)
    made = insert(runs, *(f"j_z{i}" for i in range(5)))
    counting.calls.clear()
    leased = [claim(slots, run, T0) for run in made]
    assert counting.calls == ["put_item"] * 5  # each claim is the plain conditional put
    assert all(r.tenant_slot is None for r in leased)
    counting.calls.clear()
    done = [finish(runs, slots, r, T0) for r in leased]
    assert counting.calls == ["put_item"] * 5  # and no release is sent
    assert all(not slots.release(r) for r in done)
    assert slot_items(ddb, TENANT) == []


def test_a_claim_under_the_limit_is_one_query_and_two_puts_and_a_release_one_delete(ddb):
    counting = CountingClient(ddb)
    runs = RunStore(counting, RUNS.default_name, 4)
    slots = TenantSlots(runs, 5)
    (run,) = insert(runs, "j_cost")
    counting.calls.clear()
    leased = claim(slots, run, T0)
    assert counting.calls == ["query", "put_item", "put_item"]
    done = runs.commit(leased, lambda r: lifecycle.succeed(r, now=T0, actor="w", result=None), holder=True)
    counting.calls.clear()
    assert slots.release(done)
    assert counting.calls == ["delete_item"]


def test_release_refuses_a_run_still_leased(runs):
    slots = TenantSlots(runs, 1)
    (run,) = insert(runs, "j_early")
    with pytest.raises(ValueError, match="still LEASED"):
        slots.release(claim(slots, run, T0))


def test_a_takeover_refused_for_a_live_holder_writes_only_the_slots_hint(runs, ddb):
    slots = TenantSlots(runs, 1)
    first, second = insert(runs, "j_lm1", "j_lm2")
    holder = claim(slots, first, T0)
    runs.extend_lease(holder, T0 + timedelta(seconds=300), live_at=T0 + timedelta(seconds=30))
    before = ddb.scan(TableName=RUNS.default_name)["Items"]
    with pytest.raises(TenantAtLimit):
        claim(slots, second, T0 + timedelta(seconds=LEASE) + STEAL_AFTER)
    after = ddb.scan(TableName=RUNS.default_name)["Items"]
    renewed = [i for i in after if i["sk"]["S"].startswith("S#")]
    assert renewed[0]["lease_until"]["S"] == format_instant(T0 + timedelta(seconds=300))  # the hint, only
    unchanged = [i for i in after if not i["sk"]["S"].startswith("S#")]
    assert sorted(map(str, unchanged)) == sorted(str(i) for i in before if not i["sk"]["S"].startswith("S#"))
