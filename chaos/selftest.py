"""`python -m chaos.selftest` (`make chaos-selftest`): every mutant in chaos.mutants must make
the checker fail on its figure. Each mutant runs in a small world with only the faults it
needs; the same world runs once unmutated, and a mutant is caught when its figure is above
that baseline's (a baseline above 0 is a defect of the pipeline itself, printed as such).
A world's course depends on its threads' timing where workers run a batch's records at
once, so a machine under load can steer it past the window a mutant needs: a mutant not
caught on its world's seed runs again, with that world's baseline, on a second seed
(`RETRY_SEED_OFFSET` on), and is caught when either run catches it (the line says which).
Exit 1 when any mutant survives both."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from .harness import ChaosConfig, FaultRates, Report, run_chaos
from .ledger import BAD, DOWN, EXTERNAL, FLAKY, HTTP, OK
from .mutants import MUTANTS, Mutant
from .scenario import Mix

QUIET = FaultRates.none()
# A mutant the checker survives on its world's seed runs again on that seed plus this.
RETRY_SEED_OFFSET = 1000

# The worlds the mutants run in: small (a few dozen jobs, minutes of simulated time) and with
# only the faults their mutants need.
WORLDS: dict[str, ChaosConfig] = {
    # skip/buffer-one jobs whose runs retry for longer than their schedule's step, and the
    # external fleet filling a small tenant limit: no faults.
    "policies": ChaosConfig(
        seed=11,
        runs=50,
        window_seconds=120,
        faults=QUIET,
        tenant_concurrency=2,
        hog=False,
        mix=Mix(
            types=((OK, 10), (FLAKY, 30), (DOWN, 30), (EXTERNAL, 30)),
            overlap=(10, 45, 45),
            max_attempts=(3, 5),
            base_seconds=4.0,
            kinds=(0, 1, 0),
            rates=(5, 7, 10),
            tenants=("acme", "globex"),
        ),
    ),
    # Overlapping jobs (`allow`) of one tenant, most of them leased by the external fleet, which
    # works seconds on each: more of them due at once than the tenant's limit of 2.
    "limits": ChaosConfig(
        seed=11,
        runs=60,
        window_seconds=120,
        faults=QUIET,
        tenant_concurrency=2,
        hog=False,
        mix=Mix(
            types=((OK, 20), (EXTERNAL, 80)),
            overlap=(1, 0, 0),
            max_attempts=(3, 5),
            base_seconds=4.0,
            kinds=(0, 1, 0),
            rates=(5, 7, 10),
            tenants=("acme",),
        ),
    ),
    # Pauses resumed soon after (their occurrences were made ahead), mostly `run-once`, and
    # workers that die after a claim made in the pause, before the check that would hold it.
    "pauses": ChaosConfig(
        seed=17,
        runs=80,
        window_seconds=200,
        faults=replace(QUIET, control=0.08, crash_before_effect=0.2),
        resume_after=(15, 60),
        cancel_share=0.0,
        hog=False,
        mix=Mix(types=((OK, 1),), overlap=(1, 0, 0), misfire=(1, 4, 1)),
    ),
    # Every-5-to-7-second jobs of one attempt, mostly `catch-up`, paused for 40-90 s, and
    # workers that die after half their claims, before their check: claims deep in a pause
    # whose worker died, found by the reconciler while the pause stands or after the resume
    # chose their occurrence.
    "paused-claims": ChaosConfig(
        seed=11,
        runs=150,
        window_seconds=300,
        faults=replace(QUIET, control=0.08, crash_before_effect=0.5),
        resume_after=(40, 90),
        cancel_share=0.0,
        tenant_concurrency=0,
        hog=False,
        mix=Mix(
            types=((OK, 1),),
            overlap=(1, 0, 0),
            misfire=(0, 1, 3),
            max_attempts=(1, 1),
            kinds=(0, 1, 0),
            rates=(5, 7),
        ),
    ),
    # `skip`/`buffer-one` jobs whose runs retry, paused and resumed soon after, mostly
    # `catch-up`: occurrences claimed in the pause are held, and the resume releases them
    # while an earlier run of their job (its retry held too) is still open.
    "paused-overlap": ChaosConfig(
        seed=11,
        runs=80,
        window_seconds=200,
        faults=replace(QUIET, control=0.1),
        resume_after=(15, 60),
        cancel_share=0.0,
        tenant_concurrency=0,
        hog=False,
        mix=Mix(
            types=((OK, 10), (FLAKY, 45), (DOWN, 45)),
            overlap=(0, 50, 50),
            misfire=(0, 1, 4),
            max_attempts=(3, 5),
            base_seconds=4.0,
            kinds=(0, 1, 0),
            rates=(5, 7, 10),
        ),
    ),
    # `skip`/`buffer-one` jobs whose runs retry for a minute, paused and resumed under `skip`
    # or `run-once`: the pause's occurrences are SKIPPED records (naming no run), and the
    # next run's overlap walk must pass them to the earlier run still retrying.
    "pause-skips": ChaosConfig(
        seed=11,
        runs=80,
        window_seconds=200,
        faults=replace(QUIET, control=0.15),
        resume_after=(20, 40),
        cancel_share=0.0,
        tenant_concurrency=0,
        hog=False,
        mix=Mix(
            types=((OK, 10), (DOWN, 90)),
            overlap=(0, 50, 50),
            misfire=(1, 1, 0),
            max_attempts=(5, 5),
            base_seconds=4.0,
            kinds=(0, 1, 0),
            rates=(5, 7),
        ),
    ),
    # Lost stream batches, failed publishes, outboxes that die between their marks and their
    # sends, and workers that die after their claim: runs that must start again within the
    # restart goal.
    "repairs": ChaosConfig(
        seed=5,
        runs=60,
        window_seconds=150,
        faults=replace(
            QUIET, lost_stream_batch=0.15, publish_failure=0.1, crash_before_effect=0.15, outbox_died=0.1
        ),
        hog=False,
        mix=Mix(types=((OK, 1),), overlap=(1, 0, 0), max_attempts=(3, 5)),
    ),
    # Sends refused often, and an outbox that dies between its marks and its sends on a
    # batch's last try: only a batch whose records failed on every earlier try gets there,
    # which a refused send put back to PENDING must not cause. Unmutated, no batch does.
    "refused-sends": ChaosConfig(
        seed=6,
        runs=300,
        window_seconds=200,
        faults=replace(QUIET, publish_failure=0.3, outbox_died_last_try=1.0),
        hog=False,
        mix=Mix(types=((OK, 1),), overlap=(1, 0, 0), max_attempts=(3, 5), kinds=(0, 1, 0), rates=(2, 3)),
    ),
    # Workers that die or freeze between their effect and its completion, and the copies of
    # their messages that come back before the dead invocation's deadline.
    "deaths": ChaosConfig(
        seed=6,
        runs=30,
        window_seconds=150,
        faults=replace(
            QUIET,
            freeze_worker=0.3,
            max_frozen=8,
            crash_before_completion=0.2,
            duplicate_delivery=0.1,
            late_duplicate=0.5,
        ),
        invocation_seconds=(300,),
        thaw_seconds=(120, 240),
        hog=False,
        # Enough attempts that the one after a dead invocation's deadline is still allowed.
        mix=Mix(types=((OK, 7), (FLAKY, 3)), overlap=(1, 0, 0), max_attempts=(4, 5)),
    ),
    # Effects slower than their invocations (60 s): the attempt stops waiting at its budget,
    # and Lambda ends the invocation, effect and all, at its deadline.
    "slow-effects": ChaosConfig(
        seed=7,
        runs=30,
        window_seconds=150,
        faults=replace(QUIET, slow_effect=0.5, max_slow=12),
        invocation_seconds=(60,),
        slow_effect_seconds=(40, 150),
        hog=False,
        mix=Mix(types=((OK, 1),), overlap=(1, 0, 0), max_attempts=(4, 5)),
    ),
    # Effects longer than their leases inside long invocations (their heartbeats renew the
    # lease past the slot's hint), of one tenant with more runs due than its limit of 2.
    "renewed-leases": ChaosConfig(
        seed=7,
        runs=40,
        window_seconds=150,
        faults=replace(QUIET, slow_effect=0.6, max_slow=12),
        invocation_seconds=(300,),
        slow_effect_seconds=(70, 200),
        tenant_concurrency=2,
        hog=False,
        mix=Mix(types=((OK, 1),), overlap=(1, 0, 0), max_attempts=(4, 5), tenants=("acme",)),
    ),
    # Claims frozen between their tenant slot's put and their run's write, thawing within
    # their lease, beside slow effects holding the other slot, of one tenant with more runs
    # due than its limit of 2.
    "torn-claims": ChaosConfig(
        seed=7,
        runs=40,
        window_seconds=150,
        faults=replace(QUIET, freeze_claim=0.8, max_frozen=40, slow_effect=0.15, max_slow=12),
        invocation_seconds=(300,),
        claim_thaw_seconds=(3, 40),
        slow_effect_seconds=(30, 120),
        tenant_concurrency=2,
        hog=False,
        mix=Mix(types=((OK, 1),), overlap=(1, 0, 0), max_attempts=(4, 5), tenants=("acme",)),
    ),
    # Runs that dead-letter (a permanent error, or retries exhausted) of handler jobs,
    # webhooks and external jobs, redriven often, half of the redrives with a fixed payload
    # (which a permanent failure's handler then accepts).
    "redrives": ChaosConfig(
        seed=5,
        runs=40,
        window_seconds=150,
        faults=replace(QUIET, redrive=0.5),
        tenant_concurrency=0,
        hog=False,
        mix=Mix(
            types=((BAD, 20), (DOWN, 20), (HTTP, 30), (EXTERNAL, 30)),
            overlap=(1, 0, 0),
            max_attempts=(1, 2),
            base_seconds=1.0,
        ),
    ),
    # The events consumer under a bus that refuses a fifth of the entries, redelivered and
    # lagging stream batches, beside the hog tenant's runs whose hundred attempts overflow
    # their history's budget.
    "events": ChaosConfig(
        seed=6,
        runs=30,
        window_seconds=240,
        faults=replace(QUIET, bus_refusal=0.2, stream_redelivery=0.2, stream_lane_lag=0.2),
        hog=True,
        mix=Mix(types=((OK, 7), (FLAKY, 3)), overlap=(1, 0, 0), max_attempts=(2, 4)),
    ),
    # One tenant allowed one call at a time, with effects slower than the schedules: runs
    # wait for the tenant's slot long past their `lateSeconds`, and are noted late; every
    # job asks to be told, and the queue refuses a fifth of the notifications.
    "late": ChaosConfig(
        seed=3,
        runs=40,
        window_seconds=300,
        faults=replace(QUIET, slow_effect=0.6, max_slow=30, bus_refusal=0.2),
        invocation_seconds=(60,),
        slow_effect_seconds=(20, 50),
        tenant_concurrency=1,
        hog=False,
        mix=Mix(
            types=((OK, 1),), overlap=(1, 0, 0), max_attempts=(1, 2), tenants=("acme",), notices=(0, 1, 0)
        ),
    ),
    # Webhooks only, through the production HTTP client to the receiver: no faults.
    "webhooks": ChaosConfig(
        seed=5,
        runs=30,
        window_seconds=120,
        faults=QUIET,
        hog=False,
        mix=Mix(types=((HTTP, 1),), overlap=(1, 0, 0), max_attempts=(2, 4)),
    ),
}


@dataclass
class Verdict:
    mutant: Mutant
    baseline: int
    found: int
    seconds: float

    @property
    def caught(self) -> bool:
        return self.found > self.baseline


def run_world(name: str, mutant: str | None = None, *, seed_offset: int = 0) -> Report:
    world = WORLDS[name]
    return run_chaos(replace(world, mutant=mutant, seed=world.seed + seed_offset), out=lambda line: None)


def selftest(out: Callable[[str], None] = print, only: list[str] | None = None) -> list[Verdict]:
    """Run every mutant (or those named in `only`) and its world's baseline."""
    chosen = [m for m in MUTANTS if only is None or m.name in only]
    baselines: dict[str, Report] = {}
    verdicts: list[Verdict] = []
    for mutant in chosen:
        if mutant.world not in baselines:
            started = time.monotonic()
            baselines[mutant.world] = base = run_world(mutant.world)
            out(f"world {mutant.world}: {base.figures.line()} ({time.monotonic() - started:.0f}s)")
            for figure in sorted({m.figure for m in chosen if m.world == mutant.world}):
                if getattr(base.figures, figure):
                    out(f"  the unmutated pipeline already fails {figure}={getattr(base.figures, figure)}")
        started = time.monotonic()
        report = run_world(mutant.world, mutant.name)
        verdict = Verdict(
            mutant,
            getattr(baselines[mutant.world].figures, mutant.figure),
            getattr(report.figures, mutant.figure),
            time.monotonic() - started,
        )
        again = ""
        if not verdict.caught:
            started = time.monotonic()
            base = run_world(mutant.world, seed_offset=RETRY_SEED_OFFSET)
            report = run_world(mutant.world, mutant.name, seed_offset=RETRY_SEED_OFFSET)
            retried = Verdict(
                mutant,
                getattr(base.figures, mutant.figure),
                getattr(report.figures, mutant.figure),
                time.monotonic() - started,
            )
            again = f"; on seed +{RETRY_SEED_OFFSET}: {retried.baseline} -> {retried.found}"
            verdict = retried if retried.caught else verdict
        verdicts.append(verdict)
        out(
            f"{'caught  ' if verdict.caught else 'SURVIVED'} {mutant.name:<26} {mutant.figure}"
            f" {verdict.baseline} -> {verdict.found} ({mutant.target}; {verdict.seconds:.0f}s{again})"
        )
    return verdicts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m chaos.selftest", description=__doc__)
    parser.add_argument("mutants", nargs="*", help="only these (default: all)")
    args = parser.parse_args(argv)
    started = time.monotonic()
    verdicts = selftest(only=args.mutants or None)
    survived = [v.mutant.name for v in verdicts if not v.caught]
    seconds = time.monotonic() - started
    print(f"{len(verdicts) - len(survived)} of {len(verdicts)} mutants caught in {seconds:.0f}s")
    if survived:
        print(f"FAILED: the checker survived {', '.join(survived)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
