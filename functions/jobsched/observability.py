"""Powertools logger, metrics and tracer shared by every handler."""

from __future__ import annotations

import threading

from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.metrics import MetricUnit

SERVICE = "jobsched"
NAMESPACE = "jobsched"

logger = Logger(service=SERVICE)
metrics = Metrics(namespace=NAMESPACE, service=SERVICE)
tracer = Tracer(service=SERVICE)

_UNITS = {"Count": MetricUnit.Count, "Seconds": MetricUnit.Seconds}
# The worker's records run on threads; Metrics.add_metric checks and flushes its metric set
# in steps two threads could interleave.
_METRICS_LOCK = threading.Lock()


def emit(name: str, value: float, unit: str) -> None:
    """Metric sink handed to services, so they name metrics without importing Powertools."""
    with _METRICS_LOCK:
        metrics.add_metric(name=name, unit=_UNITS.get(unit, MetricUnit.Count), value=value)
