"""The Metrics port on Powertools: the EMF documents a function prints, as the alarms read them
(namespace `jobsched`, the `service` dimension, and the port's dimensions beside it)."""

from __future__ import annotations

import json
import warnings

import pytest
from jobsched.domain.metrics import RecordedMetrics, Unit
from jobsched.observability import PowertoolsMetrics, log_metrics, metrics


@pytest.fixture
def port(monkeypatch):
    monkeypatch.setenv("POWERTOOLS_METRICS_DISABLED", "false")
    metrics.clear_metrics()
    yield PowertoolsMetrics()
    metrics.clear_metrics()


def documents(output: str) -> list[dict]:
    return [json.loads(line) for line in output.splitlines() if line.startswith('{"_aws"')]


def test_one_document_per_dimension_set_with_the_service_dimension(port, capsys):
    port.add("RunsPublished", 2)
    port.add("RunsPublished", 3)
    port.add("StartLag", 1.5, Unit.SECONDS, {"priority": "high"})
    port.add("StartLag", 0.5, Unit.SECONDS, {"priority": "high"})
    port.add("StartLag", 4, Unit.SECONDS, {"priority": "low"})
    port.add("RepairsMade", 1, dimensions={"kind": "requeue"})
    capsys.readouterr()
    port.flush()
    printed = documents(capsys.readouterr().out)
    shapes = {}
    for doc in printed:
        (directive,) = doc["_aws"]["CloudWatchMetrics"]
        assert directive["Namespace"] == "jobsched" and doc["service"] == "jobsched"
        (dimensions,) = directive["Dimensions"]
        for metric in directive["Metrics"]:
            shapes[(metric["Name"], tuple(dimensions), doc.get("priority") or doc.get("kind"))] = (
                metric["Unit"],
                doc[metric["Name"]],
            )
    assert len(printed) == 4
    assert shapes == {
        ("RunsPublished", ("service",), None): ("Count", [2.0, 3.0]),
        ("StartLag", ("service", "priority"), "high"): ("Seconds", [1.5, 0.5]),
        ("StartLag", ("service", "priority"), "low"): ("Seconds", [4.0]),
        ("RepairsMade", ("service", "kind"), "requeue"): ("Count", [1.0]),
    }
    port.flush()
    assert documents(capsys.readouterr().out) == []  # flushed once


def test_nothing_printed_and_nothing_kept_while_metrics_are_disabled(port, capsys, monkeypatch):
    """Local mode turns them off: its console must show no EMF documents."""
    monkeypatch.setenv("POWERTOOLS_METRICS_DISABLED", "true")
    for _ in range(150):  # past Powertools' 100 values, where it prints on its own
        port.add("RunsPublished")
        port.add("StartLag", 1, Unit.SECONDS, {"priority": "low"})
    port.flush()
    monkeypatch.setenv("POWERTOOLS_METRICS_DISABLED", "false")
    port.flush()
    assert capsys.readouterr().out == ""


def test_an_invocation_without_metrics_prints_and_warns_nothing(port, capsys):
    @log_metrics
    def handler(event, context):
        return "done"

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert handler({}, None) == "done"
    assert capsys.readouterr().out == ""


def test_the_invocations_metrics_are_flushed_when_the_handler_raises(port, capsys, monkeypatch):
    monkeypatch.setattr("jobsched.observability.powertools_metrics", port)

    @log_metrics
    def handler(event, context):
        port.add("RepairsFailed")
        port.add("RepairsMade", 1, dimensions={"kind": "republish"})
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        handler({}, None)
    names = {
        m["Name"]
        for d in documents(capsys.readouterr().out)
        for m in d["_aws"]["CloudWatchMetrics"][0]["Metrics"]
    }
    assert names == {"RepairsFailed", "RepairsMade"}


def test_the_recorder_keeps_names_units_and_dimensions():
    recorded = RecordedMetrics()
    recorded.add("StartLag", 2, Unit.SECONDS, {"priority": "high"})
    recorded.add("RunsPublished", 3)
    assert recorded.values("StartLag", priority="high") == [2.0]
    assert recorded.values("StartLag") == []  # another metric without the dimension
    assert recorded.shapes() == {("StartLag", Unit.SECONDS, ("priority",)), ("RunsPublished", Unit.COUNT, ())}


def test_every_document_goes_under_the_stacks_namespace_and_service(port, capsys, monkeypatch):
    """The stack sets its own namespace and service on its functions (Config.metric_names):
    each document names them, the service dimension included, whatever was set at import."""
    monkeypatch.setenv("POWERTOOLS_METRICS_NAMESPACE", "jobsched/Jobsched-staging")
    monkeypatch.setenv("POWERTOOLS_SERVICE_NAME", "Jobsched-staging")
    port.add("RunsPublished")
    port.add("StartLag", 1.5, Unit.SECONDS, {"priority": "high"})
    capsys.readouterr()
    port.flush()
    printed = documents(capsys.readouterr().out)
    assert len(printed) == 2
    for doc in printed:
        (directive,) = doc["_aws"]["CloudWatchMetrics"]
        assert directive["Namespace"] == "jobsched/Jobsched-staging"
        assert doc["service"] == "Jobsched-staging"
