"""`make bench-peers`' arithmetic (bench/peers: lag at the receiver, duplicates and missing
effects, CPU from /proc, ratios and goals, the report's marked section), without the peers."""

from __future__ import annotations

import json
import math

from bench.peers import compute, procfs, render
from bench.peers.receiver import job_id


def _row(system, workload, *, lags, cpu, own, jobs=None, create=1.0, rnd=1, throttled=0):
    jobs = jobs if jobs is not None else len(lags)
    return {
        "system": system,
        "workload": workload,
        "round": rnd,
        "jobs": jobs,
        "lags": lags,
        "duplicates": 0,
        "missing": jobs - len(lags),
        "cpu": cpu,
        "own_groups": own,
        "create_seconds": create,
        "throttled": throttled,
    }


def test_lag_is_the_first_arrival_minus_the_due_instant_and_repeats_are_duplicates():
    jobs = [("a", 100.0), ("b", 100.0), ("c", 101.0)]
    result = compute.effects(jobs, {"a": [100.5, 100.25], "b": [101.0], "x": [100.0]})
    assert result["lags"] == [0.25, 1.0]
    assert result["duplicates"] == 1
    assert result["jobs_duplicated"] == 1
    assert result["missing"] == 1  # c never arrived; x is not a job of this workload


def test_cpu_used_is_the_difference_and_never_negative():
    assert compute.cpu_used({"w": 1.0, "pg": 2.0}, {"w": 3.5, "pg": 1.0}) == {"w": 2.5, "pg": 0.0}


def test_stat_fields_give_parent_and_cpu_with_reaped_children():
    # /proc/<pid>/stat after "(comm)": state ppid pgrp session tty tpgid flags minflt cminflt
    # majflt cmajflt utime stime cutime cstime ...
    fields = ["S", "7", "1", "1", "0", "-1", "0", "0", "0", "0", "0", "150", "50", "30", "20", "20", "0"]
    ppid, cpu = procfs.parse_stat_fields(fields)
    assert ppid == 7
    assert math.isclose(cpu, 250 / procfs.TICKS)


def test_a_tree_leaves_out_the_excluded_subtree():
    table = {1: (0, 1.0), 2: (1, 1.0), 3: (2, 1.0), 4: (1, 1.0), 5: (4, 1.0), 9: (0, 1.0)}
    assert procfs.tree(1, table) == {1, 2, 3, 4, 5}
    assert procfs.tree(1, table, exclude=(4,)) == {1, 2, 3}
    assert procfs.tree(42, table) == set()


def test_the_receiver_finds_the_id_in_a_peer_body_and_in_a_jobsched_envelope():
    assert job_id({"id": "j-1"}) == "j-1"
    assert job_id({"runKey": "k", "payload": {"id": "j-2"}}) == "j-2"
    assert job_id({"payload": "text"}) is None
    assert job_id([1, 2]) is None


def _summary():
    rows = [
        _row(
            "jobsched",
            "burst_1000",
            lags=[1.0] * 99 + [6.0],
            cpu={"local": 4.0, "moto": 6.0},
            own=["local"],
            jobs=100,
            create=5.0,
        ),
        _row(
            "procrastinate",
            "burst_1000",
            lags=[0.5] * 99 + [2.0],
            cpu={"worker": 1.0, "app": 0.5, "PostgreSQL": 0.5},
            own=["worker", "app", "PostgreSQL"],
            jobs=100,
        ),
        _row("jobsched", "burst_200", lags=[0.1] * 20, cpu={"local": 1.0, "moto": 1.0}, own=["local"]),
    ]
    return compute.summarise(rows)


def test_pooled_figures_ratios_and_goals():
    summary = _summary()
    ours = summary["burst_1000"]["jobsched"]
    assert ours["lag"]["p99"] == 1.0 and ours["lag"]["max"] == 6.0
    assert ours["cpu_per_1000_own"] == 40.0
    assert ours["cpu_per_1000_total"] == 100.0
    assert ours["create_jobs_per_second"] == 20.0
    ratio = compute.ratios(summary)["burst_1000"]["procrastinate"]
    assert ratio["p99"] == 2.0
    assert ratio["cpu_total"] == 5.0
    assert ratio["cpu_own"] == 2.0
    assert compute.goal_workload(summary) == "burst_1000"
    goals = compute.goals(summary)
    assert [g["met"] for g in goals] == [True, True, False]  # 2.0x ≤ 2; 2.0x ≤ 3; 50 s for 1,000
    assert "scaled from 100" in goals[2]["measured"]
    # What holds each: the own CPU a run, and the drain (100 runs done 6 s after due: 16.7 a
    # second; moto's 60 CPU s per 1,000 runs is 6 s for 100, busy the whole drain).
    assert goals[0]["holds"].startswith("40.0 ms of CPU a run")
    assert "100 runs done 6 s after their due instant (16.7 a second)" in goals[1]["holds"]
    assert "60 CPU s per 1,000 runs: busy 100%" in goals[1]["holds"]


def test_rounds_are_pooled():
    rows = [
        _row("jobsched", "burst_2", lags=[1.0, 2.0], cpu={"local": 1.0}, own=["local"], create=2.0, rnd=1),
        _row("jobsched", "burst_2", lags=[3.0], cpu={"local": 3.0}, own=["local"], jobs=2, create=2.0, rnd=2),
    ]
    pooled = compute.summarise(rows)["burst_2"]["jobsched"]
    assert pooled["jobs"] == 4 and pooled["missing"] == 1
    assert pooled["lag"]["max"] == 3.0
    assert pooled["cpu_per_1000_total"] == 1000.0
    assert pooled["create_seconds_mean"] == 2.0


def _results():
    summary = _summary()
    return {
        "environment": {
            "cpus": 2,
            "python": "3.11",
            "load_before": [1.0],
            "load_after": [1.0],
            "mode": "default",
            "finished_at": "2026-12-05 00:00 UTC",
            "rounds": 1,
            "lead_seconds": 20.0,
        },
        "workloads": {"burst_1000": "1,000 due at one instant", "burst_200": "200 due at one instant"},
        "settings": {"jobsched": {"worker": "defaults"}},
        "idle_cpu_per_second": {"jobsched": {"local": 0.1}},
        "summary": summary,
        "ratios": compute.ratios(summary),
        "goals": compute.goals(summary),
    }


def test_the_report_section_is_replaced_in_place_and_kept_from_peers_json(tmp_path):
    report = tmp_path / "report.md"
    report.write_text("# jobsched benchmarks\n\nbefore\n")
    render.update_report(report, _results())
    once = report.read_text()
    assert once.startswith("# jobsched benchmarks\n\nbefore\n") and once.count(render.BEGIN) == 1
    render.update_report(report, _results())
    assert report.read_text() == once
    saved = tmp_path / "peers.json"
    saved.write_text(json.dumps(_results()))
    assert render.saved_section(saved)[0] in once
    assert render.saved_section(tmp_path / "missing.json") == []
