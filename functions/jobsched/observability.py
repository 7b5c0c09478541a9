"""Powertools logger, metrics and tracer shared by every handler."""

from __future__ import annotations

from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.metrics import MetricUnit

SERVICE = "jobsched"
NAMESPACE = "jobsched"

logger = Logger(service=SERVICE)
metrics = Metrics(namespace=NAMESPACE, service=SERVICE)
tracer = Tracer(service=SERVICE)

_UNITS = {"Count": MetricUnit.Count, "Seconds": MetricUnit.Seconds}


def emit(name: str, value: float, unit: str) -> None:
    """Metric sink handed to services, so they name metrics without importing Powertools."""
    metrics.add_metric(name=name, unit=_UNITS.get(unit, MetricUnit.Count), value=value)
