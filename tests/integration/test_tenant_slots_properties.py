"""Properties of the tenant slots, on moto, over random sequences of claims (some torn
between their slot and their run, the run's write landing later or never), renewals,
completions (with and without their release), the clock moving and the limit changing:

- exact: right after any claim, the tenant's live slotted leases are at most the limit;
- coherent: every live slotted lease is named by exactly one slot item (no two share one);
- not stingy: a claim refused for the limit finds every claimable slot held by a live lease
  or by a holder that is not yet worth checking (a lost release, for at most its lease)."""

from __future__ import annotations

import random
import uuid
from datetime import timedelta
from typing import Any

import boto3
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule, run_state_machine_as_test
from jobsched.domain import lifecycle
from jobsched.domain.errors import TenantAtLimit
from jobsched.domain.runs import Run, RunState
from jobsched.store.runs import RunChanged, RunStore, key_sk
from jobsched.store.schema import RUNS
from jobsched.store.tenant_slots import TenantSlots, slot_partition

from tests.helpers import T0
from tests.integration.test_tenant_slots import LEASE, claim_change, make_run

pytestmark = pytest.mark.integration

POOL = 6


def scan_runs(client: Any, tenant: str) -> list[Run]:
    items = client.scan(
        TableName=RUNS.default_name,
        FilterExpression="begins_with(sk, :r) AND tenant = :t",
        ExpressionAttributeValues={":r": {"S": "R#"}, ":t": {"S": tenant}},
    )["Items"]
    return [RunStore.from_item(i) for i in items]


class TearingClient:
    """Passes calls through; while `tear` is set, a claim's run write (the put after its
    slot's) is kept back unsent, in `kept`, and the claimer dies (ConnectionError)."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self.tear = False
        self.kept: list[dict[str, Any]] = []

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        if name != "put_item":
            return attr

        def put(**kwargs: Any) -> Any:
            if self.tear and kwargs["Item"]["sk"]["S"].startswith("R#"):
                self.kept.append(kwargs)
                raise ConnectionError("the claimer froze before its run write left")
            return attr(**kwargs)

        return put


class SlotMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.ddb = boto3.client("dynamodb")
        self.tearing = TearingClient(self.ddb)
        self.torn_limit = 0  # the highest limit a torn claim was made under
        self.runs = RunStore(self.tearing, RUNS.default_name, 4)
        self.tenant = f"t-{uuid.uuid4()}"  # one moto account for all examples: a tenant each
        self.now = T0
        self.limit = 2
        self.rng = random.Random(0)
        self.slots = TenantSlots(self.runs, self.limit, rng=self.rng)
        self.keys: list[str] = []
        self.held: dict[str, Run] = {}  # what each holder last wrote, by run key

    @initialize(rng=st.randoms(use_true_random=False))
    def make_runs(self, rng: random.Random) -> None:
        self.rng = rng  # the slots' choices too are the example's, so a failure replays
        self.slots = TenantSlots(self.runs, self.limit, rng=rng)
        for i in range(POOL):
            run = make_run(f"j_{uuid.uuid4().hex[:10]}_{i}", tenant=self.tenant)
            assert self.runs.insert(run)
            self.keys.append(run.run_key)

    def live_slotted(self) -> list[Run]:
        return [
            r
            for r in scan_runs(self.ddb, self.tenant)
            if r.lease_live(self.now) and r.tenant_slot is not None
        ]

    @rule(i=st.integers(0, POOL - 1))
    def claim(self, i: int) -> None:
        run = self.runs.get_by_key(self.keys[i])
        assert run is not None
        if not lifecycle.claimable(run, self.now):
            return
        change = claim_change(self.now)
        try:
            leased = self.slots.claim(run, change, now=self.now)
        except TenantAtLimit:
            self.assert_refusal_justified()
            return
        self.held[run.run_key] = leased
        if self.limit:
            assert len(self.live_slotted()) <= self.limit

    def assert_refusal_justified(self) -> None:
        cutoff = self.now - self.slots.steal_after
        # A holder counts as alive for a takeover while its lease outlives the cutoff.
        alive = {
            (r.job_id, key_sk(r.run_key), r.fence)
            for r in scan_runs(self.ddb, self.tenant)
            if r.lease_live(cutoff)
        }
        holders = self.slots.holders(self.tenant)
        # Every slot below the limit is present (none was left untried, and none left absent
        # while a slot past a lowered limit waited to be moved), and each present slot's
        # holder is alive or not yet worth checking.
        assert set(range(self.limit)) <= {h.index for h in holders}
        for holder in holders:
            held = (holder.run_job, holder.run_sk, holder.fence) in alive
            assert held or not holder.worth_checking(cutoff), holder

    @rule(i=st.integers(0, POOL - 1))
    def claim_torn(self, i: int) -> None:
        """A claimer that took its slot and froze before its run write left."""
        run = self.runs.get_by_key(self.keys[i])
        assert run is not None
        if not lifecycle.claimable(run, self.now):
            return
        change = claim_change(self.now)
        self.tearing.tear = True
        self.torn_limit = max(self.torn_limit, self.limit)
        try:
            self.slots.claim(run, change, now=self.now)
        except (TenantAtLimit, ConnectionError):
            pass
        finally:
            self.tearing.tear = False

    @rule(data=st.data())
    def land(self, data: st.DataObject) -> None:
        """A frozen claimer's run write lands now, however late (its condition still decides)."""
        if not self.tearing.kept:
            return
        request = self.tearing.kept.pop(data.draw(st.integers(0, len(self.tearing.kept) - 1)))
        try:
            self.ddb.put_item(**request)
        except self.ddb.exceptions.ConditionalCheckFailedException:
            return
        # A claim made under a higher limit since lowered counts as that limit's (the module's
        # lowered-limit rule): only its own, past-limit slots may be live beside the new one's.
        if self.limit and self.limit >= self.torn_limit:
            assert len(self.live_slotted()) <= self.limit

    @rule(i=st.integers(0, POOL - 1))
    def renew(self, i: int) -> None:
        mine = self.held.get(self.keys[i])
        if mine is None:
            return
        stored = self.runs.get_by_key(mine.run_key)
        assert stored is not None
        try:
            self.held[mine.run_key] = self.runs.extend_lease(
                mine, self.now + timedelta(seconds=LEASE), live_at=self.now
            )
        except RunChanged:
            # Only a lease that is lost (another fence, another state) or expired is refused.
            assert stored.fence != mine.fence or not stored.lease_live(self.now)
            del self.held[mine.run_key]

    @rule(i=st.integers(0, POOL - 1), release=st.booleans())
    def finish(self, i: int, release: bool) -> None:
        mine = self.held.pop(self.keys[i], None)
        if mine is None:
            return
        try:
            done = self.runs.commit(
                mine,
                lambda r: lifecycle.fail(
                    r, now=self.now, actor="w", error_class="E", message="m", retryable=True
                ),
                holder=True,
            )
        except RunChanged:
            return  # reclaimed by a later fence meanwhile
        assert done.state is not RunState.LEASED
        if release:
            self.slots.release(done)

    @rule(seconds=st.integers(1, 90))
    def advance(self, seconds: int) -> None:
        self.now += timedelta(seconds=seconds)

    @rule(limit=st.integers(0, 4))
    def change_limit(self, limit: int) -> None:
        self.limit = limit
        self.slots = TenantSlots(self.runs, limit, rng=self.rng)

    @invariant()
    def every_live_slotted_lease_is_named_by_one_slot_item(self) -> None:
        if not self.keys:
            return
        holders = self.slots.holders(self.tenant)
        for run in self.live_slotted():
            # A torn claim of the same run may leave a slot under the fence the next claim
            # took: its token names a claim that never landed, and it names nothing live.
            naming = [
                h
                for h in holders
                if h.is_run(run) and h.fence == run.fence and h.token in (None, run.claim_token)
            ]
            assert len(naming) == 1, run.run_key


def test_slots_stay_exact_coherent_and_not_stingy(aws):
    run_state_machine_as_test(
        SlotMachine,
        settings=settings(
            max_examples=20,
            stateful_step_count=20,
            deadline=None,
            suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
        ),
    )


@settings(max_examples=200)
@given(st.text(min_size=1, max_size=256), st.text(min_size=1, max_size=256))
def test_every_tenant_id_gets_a_fixed_size_key_of_its_own(one, other):
    assert slot_partition(one) == slot_partition(one)
    assert len(slot_partition(one)) == 70
    assert (slot_partition(one) == slot_partition(other)) == (one == other)
