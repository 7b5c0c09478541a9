"""Powertools logger, metrics and tracer shared by every handler, and the Metrics port
(jobsched.domain.metrics) implemented with Powertools.

The namespace and the service the metrics go under are the stack's own (its functions'
POWERTOOLS_METRICS_NAMESPACE and POWERTOOLS_SERVICE_NAME, jobsched.settings), read again at
each flush, so what the functions emit is what the stack's alarms read; "jobsched" outside a
stack."""

from __future__ import annotations

import functools
import os
import threading
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from aws_lambda_powertools import Logger, Metrics, Tracer
from aws_lambda_powertools.metrics import EphemeralMetrics, MetricUnit
from aws_lambda_powertools.metrics.functions import is_metrics_disabled

from .domain.metrics import Unit
from .domain.tracing import TRACE_ENV, TraceContext, parse_trace_header
from .settings import DEFAULT_SERVICE_NAME, METRICS_NAMESPACE_ENV, SERVICE_NAME_ENV


def metric_names() -> tuple[str, str]:
    """(namespace, service) the metrics go under now: the environment's, else "jobsched"."""
    return (
        os.environ.get(METRICS_NAMESPACE_ENV) or DEFAULT_SERVICE_NAME,
        os.environ.get(SERVICE_NAME_ENV) or DEFAULT_SERVICE_NAME,
    )


NAMESPACE, SERVICE = metric_names()  # as the function starts: its logs and traces name this service

logger = Logger(service=SERVICE)
metrics = Metrics(namespace=NAMESPACE, service=SERVICE)
tracer = Tracer(service=SERVICE)

_UNITS = {Unit.COUNT: MetricUnit.Count, Unit.SECONDS: MetricUnit.Seconds}


class PowertoolsMetrics:
    """The Metrics port on Powertools, flushed once per invocation by `log_metrics`.

    A service-wide value goes to the shared Metrics object (the `service` dimension). A value
    with dimensions goes to an EphemeralMetrics of its own per dimension set (`service` and
    those), so each set is one EMF document per invocation, not one per value as with
    `single_metric` (~600 log bytes a run for the worker's timings)."""

    def __init__(self) -> None:
        # The worker's records run on threads; Powertools checks and flushes its metric sets in
        # steps two threads could interleave.
        self._lock = threading.Lock()
        self._by_dimensions: dict[tuple[tuple[str, str], ...], EphemeralMetrics] = {}

    def add(
        self,
        name: str,
        value: float = 1,
        unit: Unit = Unit.COUNT,
        dimensions: Mapping[str, str] | None = None,
    ) -> None:
        if is_metrics_disabled():  # EphemeralMetrics would keep (and at 100 values print) them anyway
            return
        with self._lock:
            if not dimensions:
                metrics.add_metric(name=name, unit=_UNITS[Unit(unit)], value=value)
                return
            key = tuple(sorted(dimensions.items()))
            target = self._by_dimensions.get(key)
            if target is None:
                namespace, service = metric_names()
                target = self._by_dimensions[key] = EphemeralMetrics(namespace=namespace, service=service)
                target.add_dimension(name="service", value=service)
                for dimension, dimension_value in dimensions.items():
                    target.add_dimension(name=dimension, value=dimension_value)
            target.add_metric(name=name, unit=_UNITS[Unit(unit)], value=value)

    def flush(self) -> None:
        """Print what the invocation added: one EMF document per dimension set. Nothing at all
        when nothing was added (Powertools' log_metrics would warn about it)."""
        with self._lock:
            if metrics.metric_set:
                metrics.namespace, metrics.service = metric_names()
                metrics.flush_metrics()
            for target in self._by_dimensions.values():
                target.flush_metrics()
            self._by_dimensions.clear()


powertools_metrics = PowertoolsMetrics()


def current_trace() -> TraceContext | None:
    """The trace context of the invocation under way, as Lambda sets it (`_X_AMZN_TRACE_ID`,
    per invocation); None outside Lambda or for a header that cannot be read."""
    return parse_trace_header(os.environ.get(TRACE_ENV))


Handler = TypeVar("Handler", bound=Callable[..., Any])


def log_metrics(handler: Handler) -> Handler:
    """Flushes the invocation's metrics when the handler returns or raises (Powertools'
    `log_metrics`, for the shared set and the dimensioned ones)."""

    @functools.wraps(handler)
    def run(event: Any, context: Any) -> Any:
        try:
            return handler(event, context)
        finally:
            powertools_metrics.flush()

    return run  # type: ignore[return-value]
