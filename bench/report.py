# ruff: noqa: E501  (Markdown prose and table rows read better unwrapped)
"""Turns bench results into the terminal table, bench/report.md, bench/lag.png and the
figures of the docs' Performance page (docs/design/performance.md, written by `make bench`)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

COMMAND = "make bench"


def _f(value: float, digits: int = 2) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if isinstance(value, float) and math.isinf(value):
        return "∞"
    return f"{value:,.{digits}f}"


def _ok(flag: bool | None) -> str:
    return "-" if flag is None else ("met" if flag else "**missed**")


# --- goals ---


def lag_goal_seconds(scenario: dict[str, Any]) -> float:
    """Local mode's start-lag goal: 1 s, and 5 s for a burst of 200 or more due in one second
    (issue 14: a single-threaded moto server serves every call of the burst in turn)."""
    return 5.0 if scenario.get("scenario", "").startswith("burst") and scenario.get("runs", 0) >= 200 else 1.0


def goals(results: dict[str, Any]) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    lag = results.get("lag")
    if lag:
        for s in lag["scenarios"].values():
            p99 = s["lag"]["p99"]
            moto = s["share_of_lag"]["moto"]
            goal = lag_goal_seconds(s)
            rows.append(
                {
                    "what": f"start lag p99, {s['scenario']}",
                    "measured": f"{_f(p99)} s (p50 {_f(s['lag']['p50'])}, max {_f(s['lag']['max'])}; {moto:.0%} of lag in moto)",
                    "goal": f"≤ {goal:g} s",
                    "met": p99 <= goal,
                }
            )
    cost = results.get("cost")
    if cost:
        dense = cost["scenarios"][0]
        pr = dense["per_run"]
        rows += [
            {
                "what": f"write units per run ({dense['scenario']})",
                "measured": _f(pr["write_units"], 1),
                "goal": "≤ 5",
                "met": pr["write_units"] <= 5,
            },
            {
                "what": "SQS requests per run",
                "measured": _f(pr["sqs_requests"], 2),
                "goal": "≤ 0.35",
                "met": pr["sqs_requests"] <= 0.35,
            },
            {
                "what": "$ per million runs, all-in",
                "measured": f"${_f(dense['usd_per_million'])}",
                "goal": "≤ $3 (EventBridge Scheduler $1.00)",
                "met": dense["usd_per_million"] <= 3,
            },
            {
                "what": "$ per million runs, all-in, `billingMode: provisioned` at 70% utilisation",
                "measured": f"${_f(dense['usd_per_million_provisioned'])}",
                "goal": "≤ $3",
                "met": dense["usd_per_million_provisioned"] <= 3,
            },
        ]
        rows += _run_goal_rows(cost)
    amp = results.get("amplification")
    if amp:
        values = [r["amplification"] for r in amp["rows"]]
        sizes = ", ".join(f"{r['active_jobs']:,}: {r['amplification']:.2f}" for r in amp["rows"])
        rows.append(
            {
                "what": "sweep read amplification (active jobs: ratio)",
                "measured": sizes,
                "goal": "≤ 1.05, flat",
                "met": max(values) <= 1.05 and max(values) - min(values) <= 0.05,
            }
        )
    back = results.get("backlog")
    if back:
        worst = max(back["rows"], key=lambda r: r["backlogged_jobs"])
        calm = min(back["rows"], key=lambda r: r["backlogged_jobs"])
        rows.append(
            {
                "what": f"sweep tick, {worst['on_time_jobs']} on-time jobs beside {worst['backlogged_jobs']} catch-up backlogs",
                "measured": (
                    f"on-time done at {_f(worst['on_time_done_seconds'])} s "
                    f"(none: {_f(calm['on_time_done_seconds'])} s), tick {_f(worst['tick_seconds'])} s"
                ),
                "goal": "on-time unaffected; tick within budget",
                "met": worst["on_time_swept"] == worst["on_time_jobs"]
                and worst["on_time_done_seconds"] <= 2 * calm["on_time_done_seconds"] + 1
                and worst["tick_seconds"] <= worst["time_budget_seconds"] + 5,
            }
        )
    hot = results.get("hotpath")
    if hot:
        parts = ", ".join(f"{k} {_f(v['us_per_run_median'], 0)}" for k, v in hot["stages"].items())
        rows.append(
            {
                "what": "our CPU µs per run (AWS calls excluded)",
                "measured": parts,
                "goal": "report only",
                "met": None,
            }
        )
    prof = results.get("profile")
    if prof:
        from . import profile

        rows.append(
            {
                "what": "Lambda CPU ms per run, profiled (moto apart; API per request)",
                "measured": profile.summary(prof),
                "goal": "report only",
                "met": None,
            }
        )
    bulk = results.get("bulk")
    if bulk:
        rows.append(
            {
                "what": f"bulk redrive of {bulk['dead_letters']} dead letters (one job)",
                "measured": (
                    f"{bulk['api_requests']} requests, {_f(bulk['write_units_per_run'])} write units a run, "
                    f"{_f(bulk['seconds_in_moto'], 1)} s in moto"
                ),
                "goal": "every run redriven, one audited entry each",
                "met": bulk["redriven"] == bulk["runs_with_one_audited_entry"] == bulk["dead_letters"],
            }
        )
    cap = results.get("capacity")
    if cap:
        for burst in cap.get("top_of_hour", [])[:2]:
            rows.append(
                {
                    "what": f"{burst['runs']:,.0f} runs due at :00 (warm at {cap['target_runs_per_minute']:,}/min): modelled p99 dispatch, {burst['settings']['label']}",
                    "measured": f"{_f(burst['p99_dispatch_seconds'], 1)} s (binds: {burst['binding']}; provisioned ${_f(burst['provisioned_usd_per_month'], 0)}/month)",
                    "goal": "≤ 5 s",
                    "met": burst["meets_goal"],
                }
            )
        for row in cap["rows"]:
            if row["worker_concurrency"] != cap["rows"][0]["worker_concurrency"]:
                continue
            rows.append(
                {
                    "what": f"sustained runs/min, {row['shards']} shards, worker concurrency {row['worker_concurrency']}",
                    "measured": f"{_f(row['sustained_runs_per_minute'], 0)} (binds: {row['binding']})",
                    "goal": f"≥ {cap['target_runs_per_minute']:,}",
                    "met": row["sustained_runs_per_minute"] >= cap["target_runs_per_minute"],
                }
            )
    return rows


def _run_goal_rows(cost: dict[str, Any]) -> list[dict[str, Any]]:
    """Issue 46's goals for the scenarios with an http target and a payload: one row each."""
    from .cost import GOAL_ITEM_BYTES, GOAL_USD_PER_MILLION, GOAL_WRITE_UNITS, MAX_RUN_BYTES

    rows = []
    for s in cost["scenarios"]:
        met = s.get("goals_met")
        if not met or not s.get("key", "").endswith(("_http", "_retries")):
            continue
        pr = s["per_run"]
        if "item_bounded" in met:
            rows.append(
                {
                    "what": f"run item, {s['scenario']}",
                    "measured": f"{_f(pr['max_item_bytes'], 0)} bytes at most",
                    "goal": f"bounded (≤ {MAX_RUN_BYTES:,} bytes)",
                    "met": met["item_bounded"],
                }
            )
            continue
        rows.append(
            {
                "what": f"per run, {s['scenario']}",
                "measured": f"{_f(pr['write_units'], 1)} WU, ${_f(s['usd_per_million'])}/M, item ≤ {_f(pr['max_item_bytes'], 0)} B",
                "goal": f"≤ {GOAL_WRITE_UNITS:g} WU, ≤ ${GOAL_USD_PER_MILLION:g}, ≤ {GOAL_ITEM_BYTES:,} B",
                "met": met["write_units"] and met["usd"] and met["item"],
            }
        )
    return rows


def terminal(results: dict[str, Any]) -> str:
    rows = goals(results)
    width = max((len(r["what"]) for r in rows), default=10)
    lines = [f"{'what'.ljust(width)}  {'measured':<60}  {'goal':<34}  result"]
    for r in rows:
        lines.append(
            f"{r['what'].ljust(width)}  {r['measured']:<60}  {r['goal']:<34}  {_ok(r['met']).replace('*', '')}"
        )
    return "\n".join(lines)


def _goal_table(results: dict[str, Any]) -> list[str]:
    out = ["| What | Measured | Goal | Result |", "|---|---|---|---|"]
    for r in goals(results):
        out.append(f"| {r['what']} | {r['measured']} | {r['goal']} | {_ok(r['met'])} |")
    return out


# --- markdown ---


def _busy(env: dict[str, Any]) -> str:
    """A warning when something else was using the CPUs while the benchmarks ran."""
    if max(env["load_before"][0], env["load_after"][0]) > 0.5 * (env["cpus"] or 1) + 1:
        return "; other processes were using the machine, so wall-clock figures are pessimistic"
    return ""


def _kept(env: dict[str, Any]) -> str:
    """Which figures an `--only ... --keep` run took from the run before."""
    mode = env.get("mode", "")
    return f" ({mode.split('; ', 1)[1]})" if "; " in mode else ""


def markdown(results: dict[str, Any], picture: str | None) -> str:
    env = results["environment"]
    out = [
        "# jobsched benchmarks",
        "",
        f"Produced by `{COMMAND}` on {env['finished_at']} ({env['cpus']} CPUs, Python {env['python']}; "
        f"load average before {_f(env['load_before'][0])}, after {_f(env['load_after'][0])}{_busy(env)}). "
        f"Mode: {env['mode']}. Took {_f(env['seconds'], 0)} s. Figures are reported, never asserted.",
        "",
        "## Goals",
        "",
        *_goal_table(results),
        "",
    ]
    if "lag" in results:
        out += _lag_md(results["lag"], picture)
    if "cost" in results:
        out += _cost_md(results["cost"])
    if "amplification" in results:
        out += _amp_md(results["amplification"])
    if "backlog" in results:
        out += _backlog_md(results["backlog"])
    if "hotpath" in results:
        out += _hot_md(results["hotpath"])
    if "capacity" in results:
        out += _cap_md(results["capacity"])
    if "bulk" in results:
        out += _bulk_md(results["bulk"])
    if "events" in results:
        out += _events_md(results["events"])
    if "profile" in results:
        from . import profile

        out += profile.markdown(results["profile"])
    if "cli" in results:
        from . import cli

        out += cli.markdown(results["cli"])
    if "local_start" in results:
        from . import local_start

        out += local_start.markdown(results["local_start"])
    # `make bench-peers`'s section (bench/peers.json) is kept when this report is rewritten.
    from .peers.render import saved_section

    out += saved_section(Path(__file__).with_name("peers.json"))
    return "\n".join(out) + "\n"


def _events_md(events: dict[str, Any]) -> list[str]:
    runs = events["runs"]
    out = [
        "## 7. Run events, by `runEvents` level",
        "",
        f"{runs['succeeded']} runs that succeed, {runs['dead']} that die on a permanent error and "
        f"{runs['retried']} that fail twice before they succeed, through the real worker on moto; the Runs "
        "stream read back and, for each level, passed through the events mapping's filter and the events "
        "consumer (`bench/events.py`). Dollars a million runs of that kind: PutEvents entries (64 KB "
        "chunks), the archive's ingestion, and the consumer's Lambda requests and time (full batches of "
        "100 records, our code's time at its 512 MB CPU share plus 25 ms per PutEvents call of 10 entries).",
        "",
        "| level | run | events a run | stream records invoked | bytes an event | $ per million runs |",
        "|---|---|---|---|---|---|",
    ]
    for level, kinds in events["levels"].items():
        for kind, figures in kinds.items():
            out.append(
                f"| `{level}` | {kind} | {_f(figures['events_per_run'])} | {_f(figures['records_per_run'])} | "
                f"{figures['bytes_per_event']} | {_f(figures['usd_per_million_runs'], 3)} |"
            )
    out += [
        "",
        "At `none` the mappings' filters pass no record of a run without notifications, so the consumer "
        "is never invoked for them: events cost nothing. At `failures` a run that succeeds costs nothing "
        "either; a dead run publishes its one `run.dead`.",
        "",
    ]
    return out


def _bulk_md(bulk: dict[str, Any]) -> list[str]:
    by_index = ", ".join(f"`{k}` {_f(v, 0)}" for k, v in bulk["gsi_write_units_by_index"].items())
    operations = ", ".join(f"{k} {v}" for k, v in sorted(bulk["dynamodb_operations"].items()))
    return [
        "## 6. Bulk redrive of dead letters",
        "",
        f"{bulk['dead_letters']} runs of one job killed by the worker, then `POST /v1/dead-letters/redrive` "
        "by `jobId` through the `api` handler: a dry run, then each page (at most 100 runs) until no "
        "`nextCursor` is left. Write units are billed from the items before and after each write.",
        "",
        "| API requests | redriven | refused | runs with one audited entry | DynamoDB requests | "
        "table write units | index write units | read units | write units a run | seconds in moto (dry run) |",
        "|---|---|---|---|---|---|---|---|---|---|",
        f"| {bulk['api_requests']} | {bulk['redriven']} | {bulk['refused']} | {bulk['runs_with_one_audited_entry']} | "
        f"{bulk['dynamodb_requests']} | {_f(bulk['write_units'], 0)} | {_f(bulk['gsi_write_units'], 0)} | "
        f"{_f(bulk['read_units'], 0)} | {_f(bulk['write_units_per_run'])} | {_f(bulk['seconds_in_moto'], 1)} "
        f"({_f(bulk['dry_run_seconds'], 1)}) |",
        "",
        f"DynamoDB requests: {operations}. Index write units: {by_index} (a run leaving `dead_by_tenant` "
        "pays for its whole projected entry). Each run is read once, then written once under its "
        "version: a run that changed meanwhile is refused on its own (409), never overwritten.",
        "",
    ]


def _lag_md(lag: dict[str, Any], picture: str | None) -> list[str]:
    out = [
        "## 1. Start lag (local mode, real pipeline)",
        "",
        "Due instant → handler start, for one-time jobs created over HTTP 6 s or more ahead and a "
        "job firing every second. Local mode's pollers ran every "
        f"{lag['poll_seconds']} s for the queue (a floor of up to that much per run) and {lag.get('stream_poll_seconds', 0.2)} s for the stream; the high and low "
        "queue pollers were stopped (every run here is default priority) so their empty receives do not load the single-threaded moto server.",
        "",
        "| Scenario | runs | p50 s | p95 s | p99 s | max s | runs/s | not yet visible | moto | our code | idle |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for s in lag["scenarios"].values():
        lg, sh = s["lag"], s["share_of_lag"]
        out.append(
            f"| {s['scenario']} | {lg['n']} | {_f(lg['p50'])} | {_f(lg['p95'])} | {_f(lg['p99'])} | {_f(lg['max'])} | "
            f"{_f(s['runs_per_second'], 1)} | {sh['not_visible']:.0%} | {sh['moto']:.0%} | {sh['ours']:.0%} | {sh['idle']:.0%} |"
        )
    out += [
        "",
        "How to read the split (shares of the summed lag): *not yet visible* is time the SQS message was still "
        "delayed — SQS delays are whole seconds, so the outbox picks the one that makes the message visible "
        "between 0.25 s before (the worker waits that out) and 0.75 s after the due instant; *moto* is the worker's "
        "event source and the worker waiting on AWS calls (moto serves every call on one thread: the burst "
        "drains one run at a time at moto's speed); *our code* is the worker executing outside AWS calls; "
        "*idle* is poll intervals and thread switches. In AWS the queue is drained by up to the mapping's "
        "MaximumConcurrency workers at once and each call takes milliseconds, so the moto share is an artefact "
        "of local mode; the delay rounding is not. It is the floor of a burst spread over a second: a p99 near"
        " 0.75 s with no moto at all. A window centred on the due instant would lower it by 0.25 s for four"
        " times the worker's sleep (a mean 0.125 s a message instead of 0.03 s, billed), so it is not used.",
        "",
        "AWS time per call as seen here, per stage: "
        + ", ".join(f"{k} {v['ms_per_call']} ms x {v['calls']}" for k, v in sorted(lag["aws_calls"].items())),
        "",
    ]
    if picture:
        out += [f"![start lag histogram]({picture})", ""]
    return out


def _poller_price_md(cap: dict[str, Any]) -> str:
    """How provisioned pollers are priced, from the capacity results (older results carry a per-poller price)."""
    pp = cap.get("poller_price")
    if not pp:
        return f"Pollers are priced at ${cap.get('poller_hour_usd', 0)} a poller-hour."
    return (
        f"Provisioned pollers are billed in Event Poller Units at ${pp['usd_per_epu_hour']} an EPU-hour "
        f"({pp['pollers_per_epu']} poller an EPU for SQS, at least {pp['minimum_pollers']} pollers a mapping, per second "
        f"with a {pp['minimum_billed_seconds']:.0f} s minimum; AWS Lambda pricing, `bench/prices.json`)."
    )


def _cost_md(cost: dict[str, Any]) -> list[str]:
    out = ["## 2. Cost per run", ""]
    out += [
        "In-process moto under a simulated clock, the real handlers, local mode's event-source glue. Every AWS "
        "request is counted per stage; DynamoDB units are computed from the item images before and after each "
        "write (moto's ConsumedCapacity is a constant 1.0 or 0.5 per call whatever the size, so it is not used). "
        "Dollars at the list prices in `bench/prices.json` (us-east-1; each entry names its source and whether it "
        "was confirmed there: **check the unconfirmed ones before quoting**). Lambda time is modelled: our code's measured time scaled to the function's CPU "
        "share plus an assumed in-region latency per call (assumptions below). Fixed per-minute costs (sweeper and "
        "reconciler ticks) are measured in an idle run and left out of the per-run figures.",
        "",
        "| Scenario | runs | write units | of which GSI | read units | SQS requests | Lambda invocations | GB-s | log bytes | $ / million runs | provisioned, 70% |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for s in cost["scenarios"]:
        p = s["per_run"]
        out.append(
            f"| {s['scenario']} | {s['runs']} | {_f(p['write_units'], 1)} | {_f(p['gsi_wcu_total'], 1)} | {_f(p['rcu'], 2)} | "
            f"{_f(p['sqs_requests'], 2)} | {_f(p['invocations'], 2)} | {_f(p['gb_seconds'], 3)} | {_f(p['log_bytes'], 0)} | "
            f"${_f(s['usd_per_million'])} | ${_f(s['usd_per_million_provisioned'])} |"
        )
    out += [
        "",
        f"EventBridge Scheduler, for comparison: ${_f(cost['eventbridge_scheduler_usd_per_million'])} per million.",
        "",
        "*Provisioned, 70%*: the same units on `billingMode: provisioned` capacity auto-scaled to 70% "
        "utilisation (a unit-hour serves 3,600 units at full use). It suits a steady load; a top-of-hour "
        "burst beyond the provisioned capacity is throttled and retried until scaling catches up, so "
        "on-demand stays the default.",
        "",
        *_run_goals_md(cost),
    ]
    dense = cost["scenarios"][0]
    out += [
        f"### Per stage ({dense['scenario']}), per run",
        "",
        "| Stage | DynamoDB requests | write units (table + GSI) | read units | SQS requests | invocations | GB-s | $ / million runs |",
        "|---|---|---|---|---|---|---|---|",
    ]
    from .cost import STAGE_LABELS

    for name, st in dense["stages"].items():
        out.append(
            f"| {STAGE_LABELS.get(name, name)} | {_f(st['ddb_requests'], 2)} | {_f(st['wcu'], 1)} + {_f(st['gsi_wcu_total'], 1)} | "
            f"{_f(st['rcu'], 2)} | {_f(st['sqs_requests'], 2)} | {_f(st['invocations'], 3)} | {_f(st['gb_seconds'], 4)} | "
            f"${_f(st['usd']['total'] * 1e6)} |"
        )
    out.append(
        f"| storage, 30-day retention + PITR | | | | | | | ${_f(dense['per_run']['usd_storage'] * 1e6)} |"
    )
    totals: dict[str, float] = {}
    for st in dense["stages"].values():
        for k, v in st["usd"].items():
            totals[k] = totals.get(k, 0.0) + v
    out += [
        "",
        "By service ($ per million runs): "
        + ", ".join(f"{k.replace('_', ' ')} {_f(v * 1e6)}" for k, v in totals.items() if k != "total" and v)
        + f", storage {_f(dense['per_run']['usd_storage'] * 1e6)}.",
        "",
        f"### Where every write unit goes ({dense['scenario']}, per run)",
        "",
        *_writes_md(dense),
    ]
    webhook = next((s for s in cost["scenarios"] if s.get("key") == "minutely_http"), None)
    if webhook:
        out += [
            f"### Where every write unit goes ({webhook['scenario']}, per run)",
            "",
            "The same jobs with an `http` target and a 1 KB payload, which every run references from its job:",
            "",
            *_writes_md(webhook),
        ]
    if dense.get("changes_made"):
        out += [
            "Changes made since the first measurement (35 write units and $25.45 per million runs then):",
            "",
            *[f"- {c}" for c in dense["changes_made"]],
            "",
        ]
    if "what_ifs" in dense:
        out += [
            "### Changes not made, re-computed on the same writes",
            "",
            "Each applied to the recorded item images and writes (same DynamoDB rules), biggest saving first,"
            " cumulative. Each gives something up, named with it:",
            "",
            "| Change | How | saves alone | write units per run after |",
            "|---|---|---|---|",
        ]
        for w in dense["what_ifs"]:
            out.append(
                f"| {w['change']} | {w['how']} | {_f(w['saves_alone'], 1)} | {_f(w['write_units_after'], 1)} |"
            )
        out.append("")
        out += _floor_md(dense)
    fixed = cost["fixed"]
    out += [
        f"Fixed cost with no runs at all: ${_f(fixed['total_usd_per_month'])} per month ("
        + ", ".join(f"{k} ${_f(v['total'])}" for k, v in fixed["usd_per_month"].items())
        + ").",
        "",
        "Assumptions: " + "; ".join(f"{k}: {v}" for k, v in cost["assumptions"].items()) + ".",
        "",
    ]
    return out


def _run_goals_md(cost: dict[str, Any]) -> list[str]:
    """Issue 46's goals against every scenario that reports them."""
    from .cost import (
        GOAL_ITEM_BYTES,
        GOAL_USD_PER_MILLION,
        GOAL_WRITE_UNITS,
        MAX_RUN_BYTES,
        STRETCH_USD_PER_MILLION,
        STRETCH_WRITE_UNITS,
    )

    scenarios = [s for s in cost["scenarios"] if "goals_met" in s]
    if not scenarios:
        return []
    out = [
        "### Per run against the goals",
        "",
        f"Goals: ≤ {GOAL_WRITE_UNITS:g} write units per run (stretch ≤ {STRETCH_WRITE_UNITS:g}), table and every "
        f"index, transactions doubled; ≤ ${GOAL_USD_PER_MILLION:.2f} per million runs all-in on demand, 30 days' "
        f"storage included (stretch ≤ ${STRETCH_USD_PER_MILLION:.2f}); no run item over {GOAL_ITEM_BYTES:,} bytes on "
        f"the usual path (success on the first attempt), and any run's item bounded (≤ {MAX_RUN_BYTES:,} bytes, "
        "the run's byte budget). *Max item*: the largest run item any write of the scenario left or found; "
        "*finished*: the item as the run ends, p50 / max. The scenarios with an `http` target deliver for real "
        "to a receiver on loopback through the production HTTP client (destination policy and signing "
        "included), with a 1 KB JSON payload; a run references both from its job, not copying them.",
        "",
        "| Scenario | WU/run | of which index WU | $/M | max item bytes | finished item bytes, p50 / max | goal met? |",
        "|---|---|---|---|---|---|---|",
    ]
    for s in scenarios:
        pr, met = s["per_run"], s["goals_met"]
        if "item_bounded" in met:
            verdict = f"item bounded: {_ok(met['item_bounded'])} ({_f(s.get('attempts_per_run') or 0, 1)} attempts a run)"
        else:
            verdict = (
                f"≤ {GOAL_WRITE_UNITS:g} WU: {_ok(met['write_units'])} (≤ {STRETCH_WRITE_UNITS:g}: {_ok(met['write_units_stretch'])}); "
                f"≤ ${GOAL_USD_PER_MILLION:g}: {_ok(met['usd'])} (≤ ${STRETCH_USD_PER_MILLION:g}: {_ok(met['usd_stretch'])}); "
                f"≤ 1 KB: {_ok(met['item'])}"
            )
        out.append(
            f"| {s['scenario']} | {_f(pr['write_units'], 1)} | {_f(pr['gsi_wcu_total'], 1)} | ${_f(s['usd_per_million'])} | "
            f"{_f(pr['max_item_bytes'], 0)} | {_f(pr['finished_item_bytes_p50'], 0)} / {_f(pr['finished_item_bytes_max'], 0)} | {verdict} |"
        )
    out.append("")
    return out


def _writes_md(scenario: dict[str, Any]) -> list[str]:
    """Where a scenario's write units go, per kind of write, and what its run item costs a write."""
    from .units import write_units

    out = ["| Write | stage | per run | table units | GSI units | total |", "|---|---|---|---|---|---|"]
    for t in scenario["transitions"]:
        gsi = ", ".join(f"{k} {_f(v, 1)}" for k, v in t["gsi_wcu"].items()) or "-"
        out.append(
            f"| {t['write']} | {t['stage']} | {_f(t['per_run'], 2)} | {_f(t['table_wcu'], 2)} | {gsi} | {_f(t['total_wcu'], 2)} |"
        )
    size = scenario["per_run"]["run_item_bytes"]
    each = write_units(math.ceil(size))
    out += [
        "",
        f"The run item is {_f(size, 0)} bytes when it finishes (its history included): by then a write of it "
        f"costs {each} unit{'s' if each > 1 else ''} ({2 * each} in a transaction), fewer while it is smaller; the "
        "keys-only `open` index is written when the run enters it and when it leaves.",
        "",
    ]
    return out


def _floor_md(dense: dict[str, Any]) -> list[str]:
    """The floor of this design: what every run writes, what each write keeps, and what would
    move the floor below the goal (and why it was not done)."""
    units = dense["per_run"]["write_units"]
    # The write units a run could keep for $3 a million, everything else as measured.
    write_usd = sum(st["usd"].get("dynamodb_write", 0.0) for st in dense["stages"].values())
    other_usd = dense["per_run"]["usd"] - write_usd
    units_for_goal = max(0.0, (3e-6 - other_usd) / (write_usd / units)) if write_usd else 0.0
    return [
        "### The floor of this design",
        "",
        f"With every guarantee kept, a recurring run costs {_f(units, 1)} write units here, and each write above"
        " holds one of them: the PENDING insert and its `open` index entry are the durable occurrence and its"
        " repair (a lost publish or an expired lease is found by the reconciler); QUEUED tells a lost publish"
        " from a backlogged queue, so a backlog is not re-published; the claim and its tenant slot"
        " are the fence and the tenant's concurrency limit; the completion (leaving the `open` index) is"
        " the history and the effect's completed idempotency record (one effect per run); the counter is the"
        " job's counters in the API. The goal of 5 units (and $3 per million,"
        f" which needs about {_f(units_for_goal, 1)} on demand with the rest as measured) is below this floor."
        " What would move it:",
        "",
        "- **Make the run at its claim, not ahead of it** ("
        + (
            f"{_f(units - dense['run_at_claim_write_units'], 1)} units, re-computed on the same writes:"
            f" {_f(dense['run_at_claim_write_units'], 1)} a run"
            if "run_at_claim_write_units" in dense
            else "about 4 units"
        )
        + "; the insert, the QUEUED write and the `open` entry in and out): the sweeper would send each"
        " occurrence's message itself, with the job's watermark as"
        " the durable record of what was sent, and the worker would write the run when it first claims it."
        " Not done: the reconciler's repair, overlap policies, pause decisions and the API's view of upcoming"
        " runs all read run items that exist before they are due; this is a new lifecycle, not a change.",
        f"- **The cuts in the table above** ({_f(units - dense['what_ifs'][-1]['write_units_after'], 1)} units"
        " together): each gives up something the issue keeps (tenant concurrency, precise repair, the job's"
        " counters).",
        "- **Provisioned capacity** for a steady load: the last column of the scenario table, about half the"
        " on-demand price, at the cost of throttling a burst beyond it until scaling catches up.",
        "",
    ]


def _amp_md(amp: dict[str, Any]) -> list[str]:
    out = [
        "## 3. Sweep read amplification",
        "",
        "| Active jobs | due | queries | items read | amplification | read units per due job | sweep wall time in moto (s) |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in amp["rows"]:
        out.append(
            f"| {r['active_jobs']:,} | {r['due']} | {r['queries']} | {r['items_read']} | {r['amplification']:.3f} | "
            f"{_f(r['read_units_per_due_job'], 3)} | {_f(r['sweep_seconds_in_moto'])} |"
        )
    out += [
        "",
        "The sparse `due` index holds only ACTIVE jobs keyed by shard and next_run_at, so a sweep reads exactly "
        "what is due, whatever the table size. The wall time grows because moto sorts the whole index on every query; "
        "DynamoDB does not.",
    ]
    out.append("")
    return out


def _backlog_md(back: dict[str, Any]) -> list[str]:
    out = [
        "## 3b. A sweep tick with catch-up backlogs beside on-time jobs",
        "",
        "One tenant's jobs fired every second and were paused for two days (half `catch-up` at a rate, half "
        "`run-once` on a per-second cron; 31-day windows); on-time jobs of 20 other tenants share their shards. "
        "One sweep, in moto (every write is a moto call, so seconds here are far above DynamoDB's).",
        "",
        "| backlogged jobs | on-time jobs | on-time done (s) | tick (s) | budget (s) | backlog swept | deferred to next tick | backlog records written |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in back["rows"]:
        out.append(
            f"| {r['backlogged_jobs']} | {r['on_time_jobs']} | {_f(r['on_time_done_seconds'])} | {_f(r['tick_seconds'])} | "
            f"{_f(r['time_budget_seconds'], 0)} | {r['backlog_swept']} | {r['backlog_deferred']} | {r['backlog_records_written']:,} |"
        )
    plan = back["plan_cpu_seconds"]
    out += [
        "",
        "On-time jobs are materialised first, whatever the index order; backlogs follow one job per tenant in turn "
        "until the time budget is spent, and the rest wait for the next tick. Planning one pass of a backlogged job "
        f"costs {_f(plan['catch-up'] * 1000, 2)} ms (`catch-up`, writes ≤ 500 runs) and {_f(plan['run-once'] * 1000, 1)} ms "
        "(`run-once`: 172,800 missed occurrences counted by calendar arithmetic, not walked) of CPU.",
        "",
    ]
    return out


def _hot_md(hot: dict[str, Any]) -> list[str]:
    out = [
        "## 4. Hot-path cost of our code",
        "",
        "Process CPU per invocation minus the CPU inside botocore calls (moto answers in the calling thread, so it "
        "is excluded with them). Median of "
        f"{hot['rounds']} rounds of {hot['runs_per_round'][0]} runs.",
        "",
        "| Stage | µs per run (median) | min | max | AWS calls per run | CPU inside AWS calls per run (µs, moto) |",
        "|---|---|---|---|---|---|",
    ]
    for name, s in hot["stages"].items():
        out.append(
            f"| {name} | {_f(s['us_per_run_median'], 0)} | {_f(s['us_per_run_min'], 0)} | {_f(s['us_per_run_max'], 0)} | "
            f"{_f(s['calls_per_run'], 2)} | {_f(s['us_in_aws_calls_per_run_median'], 0)} |"
        )
    out += [
        "",
        "Measured separately: a thread start costs ~300 µs of CPU here and the worker starts two per run (the effect's "
        "ThreadPoolExecutor and the heartbeat); the three per-priority `single_metric` EMF blobs per run ~275 µs.",
        "",
    ]
    return out


def _cap_md(cap: dict[str, Any]) -> list[str]:
    inp = cap["inputs"]
    out = [
        "## 5. Capacity model",
        "",
        f"Target: {cap['target_runs_per_minute']:,} runs/min sustained, a {cap['burst_factor']}x top-of-hour burst, "
        "p99 dispatch ≤ 5 s. Inputs (measured): write units per run "
        + ", ".join(f"{k} {_f(v, 1)}" for k, v in inp["write_units_per_run"].items())
        + f"; worker {_f(inp['worker_seconds_per_run'] * 1000, 1)} ms per run, sweeper {_f(inp['sweep_seconds_per_run'] * 1000, 1)} ms per run, "
        f"outbox {_f(inp['outbox_seconds_per_run'] * 1000, 1)} ms per run (modelled Lambda time, as in the cost section).",
        "",
        "| Shards | worker concurrency | sustained runs/min | binding limit | burst p99 dispatch (s) | concurrency for burst goal | next limits |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in cap["rows"]:
        limits = list(r["limits_runs_per_minute"].items())
        nxt = "; ".join(f"{k} {_f(v, 0)}" for k, v in limits[1:3])
        out.append(
            f"| {r['shards']} | {r['worker_concurrency']} | {_f(r['sustained_runs_per_minute'], 0)} | {r['binding']} | "
            f"{_f(r['burst']['p99_dispatch_seconds'], 0)} | {r['burst']['concurrency_needed_for_goal']:,} | {nxt} |"
        )
    out += _top_of_hour_md(cap)
    row = cap["rows"][0]
    out += [
        "",
        "Per-tenant ceilings (one partition per key value): "
        + ", ".join(f"{k} {_f(v, 0)} runs/min" for k, v in row["per_tenant_runs_per_minute"].items())
        + f". Outbox headroom per stream shard: {_f(row['outbox_headroom_per_stream_shard'], 1)}x (≥ 1: keeps up at any scale).",
        "",
        "Assumptions: each on-demand table and GSI has its own 40,000 WRU/s default quota; GSI partition keys "
        "with few values (`open_shard`, `due_shard`, tenant) get one 1,000 WCU/s partition per value (split-for-heat "
        "may do better, not counted on); the worker's Lambda time is our measured CPU scaled to its 1,024 MB CPU share "
        "plus the assumed call latencies; the SQS event source adds up to 300 concurrency per minute to at most 1,250 "
        "per mapping (three mappings) and the account's 1,000; the burst is all due at :00:00 on a system warm at the "
        "target rate. Sources:",
        "",
    ]
    for name, lim in cap["limits"].items():
        out.append(f"- {name}: {lim['value']:,} — {lim['source']}")
    out.append("")
    return out


def _top_of_hour_md(cap: dict[str, Any]) -> list[str]:
    bursts = cap.get("top_of_hour")
    if not bursts:
        return []
    inp = cap["inputs"]
    out = [
        "",
        "### Top-of-hour burst, runs made ahead",
        "",
        f"{bursts[0]['runs']:,.0f} runs due at :00:00 on a system warm at {cap['target_runs_per_minute']:,} runs/min. The "
        "sweepers make each hourly job's run when it enters the horizon, the outbox queues it with an SQS delay that "
        "releases it at :00, and the worker drains the default queue. Runs not made before :00 are made after it, a "
        "tick's spare capacity a minute. The drain's rate is the least of: the worker's invocations (the mapping's "
        "pollers, which start at `workerMinPollers` x 10 invocations and grow 300/min in standard mode, 1,000/min "
        "provisioned; Lambda's environments, the warm ones plus 1,000 at once and every 10 s; the account's quota) times "
        f"the runs an invocation of a full batch dispatches a second ({_f(bursts[0]['invocation_seconds'] * 1000, 0)} ms an "
        "invocation of ten: its records wait on calls side by side, their CPU adds up), and DynamoDB (each table's and "
        "index's on-demand quota over the worker's own writes per run, "
        + ", ".join(f"{k} {_f(v, 1)}" for k, v in inp.get("worker_write_units_per_run", {}).items())
        + "; the `open` index one 1,000 WCU/s partition per shard).",
        "",
        "| settings | p99 dispatch (s) | binds | runs made before :00 | sweep tick at the burst (s) | invocations at :00 / cap | DynamoDB runs/s | provisioned $/month |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for b in bursts:
        m = b["materialise"]
        out.append(
            f"| {b['settings']['label']} | {_f(b['p99_dispatch_seconds'], 1)} | {b['binding']} | "
            f"{_f(m['made_before'], 0)} | {_f(m['tick_seconds_at_burst'], 1)} | {_f(b['concurrency_at_start'], 0)} / "
            f"{_f(b['concurrency_cap'], 0)} | {_f(b['store_runs_per_second'], 0)} | ${_f(b['provisioned_usd_per_month'], 0)} |"
        )
    last = bursts[-1]
    out += [
        "",
        f"The goal needs {last['concurrency_needed_for_goal']:,} busy invocations from :00 at the last row's "
        "invocation time, and per table or index "
        + ", ".join(f"{k} {_f(v, 0)} WRU/s" for k, v in last["store_wru_per_s_needed_for_goal"].items())
        + " (each 40,000 by default, adjustable). "
        + _poller_price_md(cap)
        + " The minimum's EPUs are billed all month, the extra EPUs of each hourly burst while it lasts (at least a "
        "minute); pre-warmed environments (Lambda provisioned concurrency on a schedule, not a stack "
        "setting) at the arm64 provisioned-concurrency price (an assumption, see `bench/prices.json`). Not modelled: a single tenant's burst (its "
        "slot partition caps one tenant at about 500 claims a second), the first burst on a new table (on-demand takes "
        "twice the previous peak at once; warm throughput or a previous burst covers it), the outbox (its headroom "
        "is shown below), targets' own limits.",
        "",
    ]
    return out


# --- picture ---


def picture(results: dict[str, Any], path: Path) -> bool:
    lag = results.get("lag")
    if not lag:
        return False
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    scenarios = list(lag["scenarios"].values())
    fig, axes = plt.subplots(1, len(scenarios), figsize=(5 * len(scenarios), 3.6), squeeze=False)
    for ax, s in zip(axes[0], scenarios, strict=True):
        lags = s["lags"]
        ax.hist(lags, bins=min(40, max(5, len(lags) // 3)), color="#4477aa")
        ax.axvline(1.0, color="#cc3311", linestyle="--", linewidth=1, label="goal p99 ≤ 1 s")
        ax.axvline(s["lag"]["p99"], color="#222222", linewidth=1, label=f"p99 {s['lag']['p99']:.2f} s")
        ax.set_title(s["scenario"], fontsize=9)
        ax.set_xlabel("due → handler start (s)")
        ax.set_ylabel("runs")
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def readme_section(results: dict[str, Any]) -> str:
    out = [
        "## Performance",
        "",
        f"`{COMMAND}` runs six benchmarks in a few minutes and prints this table; it writes "
        "`bench/results.json`, `bench/report.md` (per-stage breakdowns, assumptions, sources) and "
        "`bench/lag.png`. Figures are reported, never asserted; `make test` runs a seconds-long smoke "
        "version of each. Start lag is measured in local mode, whose single-threaded moto server "
        "dominates it; cost and capacity are counted in AWS requests and billed units, not moto seconds.",
        "",
        *_goal_table(results),
        "",
        f"Measured on {results['environment']['finished_at']}, {results['environment']['cpus']} CPUs, load average "
        f"{_f(results['environment']['load_before'][0])}{_busy(results['environment'])}"
        f"{_kept(results['environment'])}. Dollars use the "
        "us-east-1 list prices in `bench/prices.json`; check the ones it marks unconfirmed before quoting.",
        "",
    ]
    return "\n".join(out)


FIGURES_BEGIN = "<!-- bench figures: begin (make bench writes this part) -->"
FIGURES_END = "<!-- bench figures: end -->"


def update_docs_page(results: dict[str, Any], page: Path) -> bool:
    """Replace the figures between the page's bench markers with these results' section.

    Takes the results of a full (not --quick) run and the docs page; returns False, leaving
    the page alone, when the page lacks either marker. Only the marked part changes."""
    text = page.read_text(encoding="utf-8")
    begin, end = text.find(FIGURES_BEGIN), text.find(FIGURES_END)
    if begin < 0 or end < begin:
        return False
    section = readme_section(results).split("\n", 1)[1].strip("\n")  # without its heading
    page.write_text(text[: begin + len(FIGURES_BEGIN)] + "\n" + section + "\n" + text[end:], encoding="utf-8")
    return True
