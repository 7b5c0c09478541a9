"""Which region may act on a shard, and when another may take it over: the fencing rules of
running in more than one region (docs/design/regions.md).

Each shard has one ownership record: its home region, the epoch the home holds it under,
the instant the home's authority lapses unless renewed (`lease_until`) and the instant from
which it may act (`active_from`). Only the home sweeps, publishes, claims and repairs the
shard's runs, and only while `may_act` says so by its own clock. The record lives where a
conditional write is serialised across regions (a multi-Region strongly consistent table):
every change below is written conditioned on the record as read, so two regions never both
win the same epoch.

The runs themselves replicate asynchronously (last writer wins, a condition evaluated only
against the local replica), so a handover must let the old home's last writes arrive before
the new home acts: a new home acts from the old home's authority's end plus the replication
window plus twice the clock skew (`handover_at`). Every run write carries the epoch it was
made under, and a write under an older epoch than the run's is refused (`write_allowed`).

Clocks: every region's clock is at most `max_clock_skew` off true time (as in
domain.effects), so two regions' clocks differ by at most twice that. A holder compares its
own clock with its own lease; the margins are taken where a handover is decided.

Pure: no clock is read here and nothing is written; instants are given by the caller."""

from __future__ import annotations

from datetime import datetime, timedelta
from enum import StrEnum
from typing import Self

from pydantic import Field, model_validator

from .effects import MAX_CLOCK_SKEW
from .instants import Instant
from .models import Model, rule_on

# How long a renewal keeps the home's authority: three renewal intervals, so one missed
# renewal (a slow tick) does not lose the shard.
DEFAULT_LEASE = timedelta(seconds=90)
# How often the home renews (the reconciler's two ticks a minute).
DEFAULT_RENEW_EVERY = timedelta(seconds=30)
# How long a write may take to reach every other replica. DynamoDB gives no bound (no SLA on
# ReplicationLatency); AWS's guidance for evacuating a healthy region is ten times the
# recent maximum, about a second typically. An assumption the design states.
DEFAULT_REPLICATION_WINDOW = timedelta(seconds=30)


class HandoverKind(StrEnum):
    TAKEOVER = "takeover"  # the home stopped renewing: another region takes the shard
    MOVE = "move"  # an operator moves the shard: the current lease is waited out
    RELEASE = "release"  # the home hands the shard over itself and stops at once


class RegionTiming(Model):
    """The bounds the rules rely on. Every duration is positive except the replication
    window (0: writes assumed visible everywhere at once, as in one region)."""

    lease: timedelta = DEFAULT_LEASE
    renew_every: timedelta = DEFAULT_RENEW_EVERY
    replication_window: timedelta = DEFAULT_REPLICATION_WINDOW
    max_clock_skew: timedelta = Field(default=MAX_CLOCK_SKEW)

    @model_validator(mode="after")
    def _bounds(self) -> Self:
        if self.renew_every <= timedelta(0):
            raise rule_on("renew_every", "must be positive")
        if self.lease <= self.renew_every:
            raise rule_on("lease", "must be longer than renew_every, or every renewal races its lapse")
        if self.replication_window < timedelta(0):
            raise rule_on("replication_window", "must not be negative")
        if self.max_clock_skew < timedelta(0):
            raise rule_on("max_clock_skew", "must not be negative")
        return self

    @property
    def handover_gap(self) -> timedelta:
        """What separates the end of one home's authority from the start of the next, by
        their clocks: the replication window and twice the skew (two clocks, each off by up
        to the skew)."""
        return self.replication_window + 2 * self.max_clock_skew

    def takeover_bound(self, poll_every: timedelta) -> timedelta:
        """The longest a shard goes, in true time, from its home's last renewal (the home
        stopping just after it) to the next home's first act, when a claimant checks every
        `poll_every`: the lease, twice the skew before a claim (by the claimant's clock,
        which may be up to twice the skew behind the home's), then the later of the poll's
        wait and the replication window (the claim may land while the window runs)."""
        return self.lease + 4 * self.max_clock_skew + max(poll_every, self.replication_window)


class ShardOwnership(Model):
    """The ownership record of one shard.

    `home` may act on the shard's runs from `active_from` until `lease_until`, by its own
    clock; `epoch` rises by one at every handover and is what each run write carries."""

    shard: int = Field(ge=0)
    home: str = Field(min_length=1)
    epoch: int = Field(ge=1)
    lease_until: Instant
    active_from: Instant

    @model_validator(mode="after")
    def _order(self) -> Self:
        if self.lease_until < self.active_from:
            raise rule_on("lease_until", "must not be before active_from")
        return self


class OwnershipRefused(Exception):
    """A change the rules do not allow: `reason` says which rule."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def first_ownership(shard: int, home: str, now: datetime, timing: RegionTiming) -> ShardOwnership:
    """The record a shard starts with: `home` at epoch 1, acting at once (no earlier home
    wrote its runs), its lease from `now`."""
    return ShardOwnership(shard=shard, home=home, epoch=1, lease_until=now + timing.lease, active_from=now)


def may_act(ownership: ShardOwnership, region: str, now: datetime) -> bool:
    """Whether `region` may sweep, publish, claim or repair the shard's runs at `now`, its
    own clock, holding `ownership` (the record as it last read or wrote it).

    True only for the home, from `active_from` (inclusive) until `lease_until` (exclusive).
    A region that lost the shard holds a record whose lease it cannot extend, so it stops at
    that lease's end at the latest, whatever it has not yet read."""
    return region == ownership.home and ownership.active_from <= now < ownership.lease_until


def renew(ownership: ShardOwnership, region: str, now: datetime, timing: RegionTiming) -> ShardOwnership:
    """The record after the home renews at `now`, its clock: the lease from `now`, never
    shortened. Written conditioned on the record as read (home and epoch unchanged), so a
    renewal racing a handover loses.

    Raises OwnershipRefused: `region` is not the home. A home whose lease lapsed may still
    renew while the record names it: no other region took the shard, so nobody acted
    meanwhile (and it did not act either: `may_act` refused it)."""
    if region != ownership.home:
        raise OwnershipRefused(f"{region} is not the home of shard {ownership.shard} ({ownership.home} is)")
    return ownership.model_copy(update={"lease_until": max(ownership.lease_until, now + timing.lease)})


def handover_at(authority_end: datetime, timing: RegionTiming) -> datetime:
    """The instant, by the new home's clock, from which it may act on a shard whose previous
    home's authority ended at `authority_end`, by that home's clock: the previous home's last
    write happened at true time before `authority_end` plus the skew, reaches every replica
    within the replication window, and the new home's clock may be the skew ahead."""
    return authority_end + timing.handover_gap


def takeover_allowed(ownership: ShardOwnership, claimant: str, now: datetime, timing: RegionTiming) -> bool:
    """Whether `claimant` may take the shard at `now`, its own clock, holding `ownership` as
    read from the serialised store: it is not the home, and the home's lease has surely
    lapsed (its end plus twice the skew, for the two clocks), so a home still renewing on
    time keeps its shard. Safety does not rest on this margin but on `active_from`: the
    claimant acts only from `handover_at(lease_until)`, whenever it claimed."""
    return claimant != ownership.home and now >= ownership.lease_until + 2 * timing.max_clock_skew


def take_over(
    ownership: ShardOwnership, claimant: str, now: datetime, timing: RegionTiming
) -> ShardOwnership:
    """The record `claimant` writes when its home stopped renewing: the next epoch, acting
    from `handover_at(lease_until)`, its lease from then. Written conditioned on the record
    as read (epoch and lease_until unchanged), so a late renewal or a rival claim wins alone.

    Raises OwnershipRefused: `takeover_allowed` is false."""
    if not takeover_allowed(ownership, claimant, now, timing):
        raise OwnershipRefused(
            f"{claimant} may not take shard {ownership.shard}: {ownership.home}'s lease has not surely lapsed"
        )
    return _next_home(ownership, claimant, handover_at(ownership.lease_until, timing), timing)


def move(ownership: ShardOwnership, target: str, timing: RegionTiming) -> ShardOwnership:
    """The record an operator's move (failover or failback) writes, whatever the home's
    state: the next epoch, homed in `target`, acting from the end of the current lease plus
    the handover gap. The old home may act until its lease ends (it renews no more: the
    epoch changed), so the move waits it out rather than trusting it to stop.

    Raises OwnershipRefused: `target` is already the home."""
    if target == ownership.home:
        raise OwnershipRefused(f"shard {ownership.shard} is already homed in {target}")
    return _next_home(ownership, target, handover_at(ownership.lease_until, timing), timing)


def release(
    ownership: ShardOwnership, region: str, target: str, now: datetime, timing: RegionTiming
) -> ShardOwnership:
    """The record the home writes when it hands the shard to `target` itself (a planned move
    it has seen): it stops acting at `now`, its clock, so `target` acts from `now` plus the
    handover gap instead of waiting out the lease; never before the released record's own
    `active_from`, which holds the gap after the home before it (a home that releases before
    it ever acted has not yet waited that out).

    Raises OwnershipRefused: `region` is not the home, or `target` is."""
    if region != ownership.home:
        raise OwnershipRefused(f"{region} is not the home of shard {ownership.shard} ({ownership.home} is)")
    if target == region:
        raise OwnershipRefused(f"shard {ownership.shard} is already homed in {target}")
    stopped = handover_at(min(now, ownership.lease_until), timing)
    return _next_home(ownership, target, max(ownership.active_from, stopped), timing)


def _next_home(
    ownership: ShardOwnership, home: str, active_from: datetime, timing: RegionTiming
) -> ShardOwnership:
    return ShardOwnership(
        shard=ownership.shard,
        home=home,
        epoch=ownership.epoch + 1,
        active_from=active_from,
        lease_until=active_from + timing.lease,
    )


def write_allowed(run_epoch: int | None, writer_epoch: int) -> bool:
    """Whether a write made under `writer_epoch` may replace a run stored under `run_epoch`
    (None: written before epochs existed, as 0): never under an older epoch than the run's.

    This is the condition each run write carries. Under asynchronous replication it is
    evaluated against the writer's own replica only, which may not yet hold the newer
    epoch's writes: it refuses a stale writer once they arrived, and `may_act` (with the
    handover gap) is what keeps a stale writer from writing before."""
    return writer_epoch >= (run_epoch or 0)
