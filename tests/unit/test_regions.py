"""domain.regions: who may act on a shard, when another region may take it, and the epoch a
run write must carry. Hand-written boundaries, then interleavings of two or three regions
whose clocks are off true time by up to the skew, leases renewed or left to lapse, claims,
operator moves and releases, checked exactly on true time: no two regions ever act on a
shard at once, and a new home acts no earlier than the replication window after the
previous one stopped (so every write the previous one made has reached it)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jobsched.domain.regions import (
    OwnershipRefused,
    RegionTiming,
    ShardOwnership,
    first_ownership,
    handover_at,
    may_act,
    move,
    release,
    renew,
    take_over,
    takeover_allowed,
    write_allowed,
)
from pydantic import ValidationError

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
S = timedelta(seconds=1)
TIMING = RegionTiming(lease=90 * S, renew_every=30 * S, replication_window=30 * S, max_clock_skew=3 * S)


def owned(**fields) -> ShardOwnership:
    base = {"shard": 7, "home": "a", "epoch": 3, "lease_until": T0 + 90 * S, "active_from": T0}
    return ShardOwnership.model_validate({**base, **fields})


# --- the timing's bounds ---


@pytest.mark.parametrize(
    ("fields", "field_name"),
    [
        ({"renew_every": 0 * S}, "renew_every"),
        ({"lease": 30 * S, "renew_every": 30 * S}, "lease"),
        ({"replication_window": -1 * S}, "replication_window"),
        ({"max_clock_skew": -1 * S}, "max_clock_skew"),
    ],
)
def test_timing_refuses_bounds_the_rules_cannot_rely_on(fields, field_name):
    with pytest.raises(ValidationError) as refused:
        RegionTiming.model_validate(fields)
    assert refused.value.errors()[0]["ctx"]["loc"] == (field_name,)


def test_the_defaults_hold_and_bound_a_takeover():
    timing = RegionTiming()
    assert timing.handover_gap == timing.replication_window + 2 * timing.max_clock_skew
    # 90 s lease + 4 x 3 s skew + the later of a 30 s poll and the 30 s replication window.
    assert timing.takeover_bound(30 * S) == 132 * S
    assert timing.takeover_bound(60 * S) == 162 * S


def test_an_ownership_record_refuses_a_lease_ending_before_it_starts():
    with pytest.raises(ValidationError):
        owned(lease_until=T0 - S)


# --- who may act ---


def test_only_the_home_acts_and_only_inside_its_window():
    o = owned()
    assert may_act(o, "a", T0)
    assert may_act(o, "a", T0 + 89 * S)
    assert not may_act(o, "a", T0 + 90 * S)  # the lease's end is excluded
    assert not may_act(o, "a", T0 - S)  # not before active_from
    assert not may_act(o, "b", T0 + S)


def test_a_renewal_extends_from_now_and_never_shortens():
    o = owned()
    assert renew(o, "a", T0 + 30 * S, TIMING).lease_until == T0 + 120 * S
    assert renew(o, "a", T0 - 60 * S, TIMING).lease_until == T0 + 90 * S
    with pytest.raises(OwnershipRefused):
        renew(o, "b", T0, TIMING)


# --- handovers ---


def test_a_takeover_waits_for_the_lease_and_both_clocks():
    o = owned()
    surely_lapsed = o.lease_until + 6 * S
    assert not takeover_allowed(o, "b", surely_lapsed - S, TIMING)
    assert takeover_allowed(o, "b", surely_lapsed, TIMING)
    assert not takeover_allowed(o, "a", surely_lapsed, TIMING)  # the home does not take its own
    with pytest.raises(OwnershipRefused):
        take_over(o, "b", surely_lapsed - S, TIMING)


def test_a_takeover_writes_the_next_epoch_acting_after_the_replication_window():
    o = owned()
    taken = take_over(o, "b", o.lease_until + 10 * S, TIMING)
    assert (taken.home, taken.epoch, taken.shard) == ("b", 4, 7)
    # lease end + replication window + twice the skew
    assert taken.active_from == o.lease_until + 36 * S == handover_at(o.lease_until, TIMING)
    assert taken.lease_until == taken.active_from + TIMING.lease
    assert not may_act(taken, "b", taken.active_from - S)
    assert may_act(taken, "b", taken.active_from)


def test_an_operator_move_waits_out_the_current_lease():
    o = owned()
    moved = move(o, "b", TIMING)
    assert (moved.home, moved.epoch) == ("b", 4)
    assert moved.active_from == o.lease_until + TIMING.handover_gap
    with pytest.raises(OwnershipRefused):
        move(o, "a", TIMING)


def test_a_release_hands_over_from_the_instant_the_home_stops():
    o = owned()
    released = release(o, "a", "b", T0 + 10 * S, TIMING)
    assert (released.home, released.epoch) == ("b", 4)
    assert released.active_from == T0 + 10 * S + TIMING.handover_gap
    # The old home holds the released record: it acts no more.
    assert not may_act(released, "a", T0 + 10 * S)
    # A release after the lease lapsed counts from the lease's end, not later.
    assert release(o, "a", "b", T0 + 500 * S, TIMING).active_from == o.lease_until + TIMING.handover_gap
    # A home that releases before it ever acted still waits out the home before it.
    moved = move(o, "b", TIMING)
    passed_on = release(moved, "b", "c", T0 + 10 * S, TIMING)
    assert passed_on.active_from == moved.active_from == o.lease_until + TIMING.handover_gap
    with pytest.raises(OwnershipRefused):
        release(o, "b", "c", T0, TIMING)
    with pytest.raises(OwnershipRefused):
        release(o, "a", "a", T0, TIMING)


def test_a_region_that_comes_back_cannot_act_on_its_lost_shard():
    old = owned()
    taken = take_over(old, "b", old.lease_until + 6 * S, TIMING)
    # "a" returns hours later: its own view has lapsed, and the current record is b's.
    later = old.lease_until + 3600 * S
    assert not may_act(old, "a", later)
    assert not may_act(taken, "a", later)
    with pytest.raises(OwnershipRefused):
        renew(taken, "a", later, TIMING)


# --- the epoch a run write carries ---


@pytest.mark.parametrize(
    ("run_epoch", "writer_epoch", "allowed"),
    [(None, 1, True), (None, 0, True), (3, 3, True), (3, 4, True), (4, 3, False), (1, 0, False)],
)
def test_a_write_under_an_older_epoch_is_refused(run_epoch, writer_epoch, allowed):
    assert write_allowed(run_epoch, writer_epoch) is allowed


def test_the_per_write_condition_alone_does_not_fence_a_stale_region():
    """Why the lease and the handover gap are needed: the condition is evaluated against the
    writer's own replica. "a" still holds epoch 3 and its replica has not yet received the
    new home's epoch-4 write, so its stale write passes the condition there; only `may_act`
    (its lease has lapsed by its clock) keeps it from writing."""
    old = owned()
    taken = take_over(old, "b", old.lease_until + 6 * S, TIMING)
    replica_in_a = 3  # b's epoch-4 write of the run is still replicating
    assert write_allowed(replica_in_a, old.epoch)
    assert not may_act(old, "a", taken.active_from)


@given(st.lists(st.integers(min_value=0, max_value=6), max_size=30))
def test_once_a_newer_epoch_is_stored_no_older_write_lands(writes):
    stored: int | None = None
    highest = 0
    for epoch in writes:
        landed = write_allowed(stored, epoch)
        assert landed is (epoch >= highest)
        if landed:
            stored = epoch
            highest = epoch
        assert (stored or 0) == highest  # the stored epoch never goes down


# --- interleavings ---

REGIONS = ("a", "b", "c")
FOREVER = 10**9


@dataclass
class Region:
    name: str
    offset: int  # seconds its clock is off true time (within the skew)
    view: ShardOwnership  # the record as it last read or wrote it
    since: int  # true second it got `view`
    acting: list[tuple[int, int, int]] = field(default_factory=list)  # (epoch, start, end)

    def clock(self, t: int) -> datetime:
        return T0 + (t + self.offset) * S

    def hold(self, view: ShardOwnership, t: int) -> None:
        """Close the acting interval of the view held until `t`, then hold `view` from `t`."""
        self._close(t)
        self.view, self.since = view, t

    def _close(self, until: int) -> None:
        if self.view.home != self.name:
            return
        # may_act on true second s: active_from <= s + offset < lease_until
        start = max(self.since, _seconds(self.view.active_from) - self.offset)
        lapses = _seconds(self.view.lease_until) - self.offset
        end = min(until, lapses)
        if start < end:
            for s in (start, end - 1):  # the interval is may_act's, exactly
                assert may_act(self.view, self.name, self.clock(s))
            if end == lapses:
                assert not may_act(self.view, self.name, self.clock(end))
            self.acting.append((self.view.epoch, start, end))

    def finish(self) -> None:
        self._close(FOREVER)


def _seconds(at: datetime) -> int:
    whole = (at - T0) / S
    assert whole == int(whole)
    return int(whole)


steps = st.lists(
    st.tuples(
        st.integers(min_value=0, max_value=90),  # seconds before the step
        st.sampled_from(["renew", "claim", "move", "release", "read"]),
        st.integers(min_value=0, max_value=2),  # the region acting
        st.integers(min_value=0, max_value=2),  # the target of a move or release
    ),
    max_size=60,
)


@st.composite
def worlds(draw):
    skew = draw(st.integers(min_value=0, max_value=5))
    renew_every = draw(st.integers(min_value=5, max_value=40))
    timing = RegionTiming(
        lease=draw(st.integers(min_value=renew_every + 1, max_value=150)) * S,
        renew_every=renew_every * S,
        replication_window=draw(st.integers(min_value=0, max_value=40)) * S,
        max_clock_skew=skew * S,
    )
    count = draw(st.integers(min_value=2, max_value=3))
    offsets = draw(st.lists(st.integers(min_value=-skew, max_value=skew), min_size=count, max_size=count))
    return timing, offsets, draw(steps)


def simulate(timing: RegionTiming, offsets: list[int], plan) -> list[Region]:
    """Run `plan` on true seconds. The record is in a serialised store (each change is
    conditioned on the record as read, so a read-decide-write step is atomic); a region
    acts on whatever record it last read or wrote, and never stops acting by itself: one
    that does not renew is an isolated region, still running on its last view."""
    names = REGIONS[: len(offsets)]
    record = first_ownership(7, names[0], T0 + offsets[0] * S, timing)
    regions = [Region(name, offset, record, 0) for name, offset in zip(names, offsets, strict=True)]
    t = 0
    for wait, action, who, whom in plan:
        t += wait
        region = regions[who % len(regions)]
        target = names[whom % len(names)]
        now = region.clock(t)
        if action == "renew" and record.home == region.name:
            record = renew(record, region.name, now, timing)
        elif action == "claim" and takeover_allowed(record, region.name, now, timing):
            record = take_over(record, region.name, now, timing)
        elif action == "move" and target != record.home:
            record = move(record, target, timing)  # an operator's: no region learns of it yet
            continue
        elif action == "release" and record.home == region.name and target != region.name:
            record = release(record, region.name, target, now, timing)
        region.hold(record, t)
    for region in regions:
        region.finish()
    return regions


@settings(max_examples=400, deadline=None)
@given(worlds())
def test_no_two_regions_ever_act_on_a_shard_at_once(world):
    timing, offsets, plan = world
    acting = [(r.name, *span) for r in simulate(timing, offsets, plan) for span in r.acting]
    for name, _, start, end in acting:
        for other, _, other_start, other_end in acting:
            if other != name:
                assert end <= other_start or other_end <= start, (name, other, acting)


@settings(max_examples=400, deadline=None)
@given(worlds())
def test_a_new_home_acts_only_once_the_previous_homes_writes_have_arrived(world):
    """Every write the home of an earlier epoch made (before its acting ended) reaches every
    replica within the replication window: the next home's first act is no earlier."""
    timing, offsets, plan = world
    window = int(timing.replication_window / S)
    acting = [span for r in simulate(timing, offsets, plan) for span in r.acting]
    for epoch, start, _ in acting:
        for earlier_epoch, _, earlier_end in acting:
            if earlier_epoch < epoch:
                assert start >= earlier_end + window, (acting, window)


@settings(max_examples=200, deadline=None)
@given(
    skew=st.integers(min_value=0, max_value=5),
    offsets=st.lists(st.integers(min_value=-5, max_value=5), min_size=2, max_size=2),
    stop_after=st.integers(min_value=0, max_value=600),
    poll_every=st.integers(min_value=1, max_value=60),
)
def test_a_shard_whose_home_stops_renewing_is_acted_on_again_within_the_bound(
    skew, offsets, stop_after, poll_every
):
    """The home renews every interval until it stops; the other region polls and claims as
    soon as it may: the shard is acted on again at most `takeover_bound` after the stop."""
    timing = RegionTiming(max_clock_skew=skew * S)
    offsets = [max(-skew, min(skew, o)) for o in offsets]
    record = first_ownership(7, "a", T0 + offsets[0] * S, timing)
    every = int(timing.renew_every / S)
    last_renewal = 0
    for t in range(0, stop_after + 1, every):
        record = renew(record, "a", T0 + (t + offsets[0]) * S, timing)
        last_renewal = t
    t = last_renewal
    while not takeover_allowed(record, "b", T0 + (t + offsets[1]) * S, timing):
        t += poll_every
    taken = take_over(record, "b", T0 + (t + offsets[1]) * S, timing)
    acts_from = _seconds(taken.active_from) - offsets[1]  # true second
    assert acts_from - last_renewal <= timing.takeover_bound(poll_every * S) / S
