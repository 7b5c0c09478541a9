"""Names shared by the construct and its tests: construct ids, logical ids, handlers, routes,
outputs, and where the assets come from.

Table keys, indexes and queue settings are not here: they come from jobsched.store.schema.

Paths are the package's own: the code asset is this `jobsched` package (and the user's handler
packages beside it), wherever it is installed; the layer's requirements ship inside this package
(layer-requirements.txt, a copy of the checkout's layers/requirements.txt that a test holds
equal). Builds are cached under layers/build/ in a checkout, else under $JOBSCHED_BUILD_DIR or
the user's cache directory."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from jobsched.domain.models import MAX_TIMEOUT_SECONDS
from jobsched.services.worker import WORKER_OVERHEAD_SECONDS
from jobsched.store.schema import QUEUES, TableSpec

CDK_DIR = Path(__file__).resolve().parent  # this package: jobsched/cdk
# Where `jobsched` and its sibling packages live: functions/ in a checkout, site-packages once
# installed. The code asset is built from here.
FUNCTIONS_DIR = CDK_DIR.parent.parent
# The layer's requirements, shipped in the package (tests/infrastructure/test_cdk.py holds it
# equal to the checkout's layers/requirements.txt, their one source).
LAYER_REQUIREMENTS = CDK_DIR / "layer-requirements.txt"
BUILD_DIR_ENV = "JOBSCHED_BUILD_DIR"


def _checkout() -> Path | None:
    """The repository root when this package runs from a checkout (functions/jobsched/cdk)."""
    root = FUNCTIONS_DIR.parent
    return root if FUNCTIONS_DIR.name == "functions" and (root / "layers").is_dir() else None


def _build_dir() -> Path:
    """Where the layer's wheels and the built code are cached: $JOBSCHED_BUILD_DIR, the
    checkout's layers/build/, or the user's cache directory (never site-packages)."""
    if os.environ.get(BUILD_DIR_ENV):
        return Path(os.environ[BUILD_DIR_ENV])
    checkout = _checkout()
    if checkout is not None:
        return checkout / "layers" / "build"
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "jobsched" / "build"


LAYER_BUILD_DIR = _build_dir()

STACK_ID = "Jobsched"

# Lambda runtime and architecture; the layer is built for exactly these.
PYTHON_VERSION = "3.13"
PIP_PLATFORM = "manylinux2014_aarch64"

# The function asset is the runtime package, plus the packages of the user's own job handlers
# (`handlerModules`, placed in functions/). Local mode and the CLI are packages of their own
# beside it (functions/jobsched_local, functions/jobsched_cli) and never ship; the chaos harness
# lives outside functions/ (chaos/). The asset names what it holds; the one subpackage left out
# of it is DEPLOY_ONLY, below.
RUNTIME_PACKAGE = "jobsched"
# Subpackages of the runtime package that never run in Lambda: this construct (it needs
# aws-cdk-lib, which the layer does not hold) is left out of the code asset.
DEPLOY_ONLY = frozenset({"cdk"})
LOCAL_PACKAGES = frozenset({"jobsched_local", "jobsched_cli", "jobsched_console"})


def code_asset_packages(
    handler_modules: Sequence[str] = (), handler_code: str | Path | None = None
) -> tuple[str, ...]:
    """The top-level packages (or modules) that make up the code asset: the runtime package
    and those of `handler_modules`, each found where `package_root` looks. Raises ValueError
    naming a package that is local-only or found nowhere."""
    extra = sorted({module.split(".", 1)[0] for module in handler_modules} - {RUNTIME_PACKAGE})
    for name in extra:
        if name in LOCAL_PACKAGES:
            raise ValueError(f"handlerModules: {name} runs on the user's machine and is not deployed")
        if package_root(name, handler_code) is None:
            where = f"{Path(handler_code).resolve()} (handlerCode) or " if handler_code else ""
            raise ValueError(f"handlerModules: no package or module {name!r} in {where}{FUNCTIONS_DIR}")
    return (RUNTIME_PACKAGE, *extra)


def package_root(name: str, handler_code: str | Path | None = None) -> Path | None:
    """The directory that holds package or module `name`: the app's handler code directory
    (`handler_code`, never for the runtime package), else functions/; None when neither does."""
    roots = [FUNCTIONS_DIR]
    if handler_code is not None and name != RUNTIME_PACKAGE:
        roots.insert(0, Path(handler_code).resolve())
    for root in roots:
        if (root / name).is_dir() or (root / f"{name}.py").is_file():
            return root
    return None


# --- functions ---

API = "api"
SWEEPER = "sweeper"
OUTBOX = "outbox"
RECONCILER = "reconciler"
WORKER = "worker"
EVENTS = "events"
NOTIFIER = "notifier"


@dataclass(frozen=True)
class FunctionSpec:
    name: str
    handler: str
    memory_mb: int
    timeout_seconds: int
    description: str


FUNCTIONS = (
    # API Gateway gives up after 29 s; a longer Lambda timeout would only burn money.
    FunctionSpec(API, "jobsched.handlers.api.handler", 512, 28, "jobsched HTTP API"),
    # Ticks every minute: finish well before the next tick.
    FunctionSpec(
        SWEEPER, "jobsched.handlers.sweeper.handler", 1024, 50, "jobsched sweeper (per shard group)"
    ),
    FunctionSpec(OUTBOX, "jobsched.handlers.outbox.handler", 512, 60, "jobsched outbox: Runs stream to SQS"),
    FunctionSpec(RECONCILER, "jobsched.handlers.reconciler.handler", 512, 50, "jobsched reconciler"),
    # Batches of stream records; PutEvents retries stay well inside a minute.
    FunctionSpec(
        EVENTS, "jobsched.handlers.events.handler", 512, 60, "jobsched events: table streams to the event bus"
    ),
    # Batches of NOTIFIER_BATCH_SIZE deliveries, each call cut off at 10 s
    # (services.notifications.DELIVERY_TIMEOUT_SECONDS).
    FunctionSpec(
        NOTIFIER,
        "jobsched.handlers.notifier.handler",
        512,
        60,
        "jobsched notifier: run notifications to tenants' targets",
    ),
    # The longest effect a job may ask for plus the worker's own overhead: 840 + 60 = 900 s,
    # Lambda's maximum; a batch's records run at once, each with its full timeoutSeconds.
    # The queues' visibility timeout is six times this (jobsched.cdk.dead_letters.WORKER_QUEUE_VISIBILITY).
    # Its entry point holds the batch's messages before the worker's code loads
    # (handlers.worker_entry), then runs the worker's handler (handlers.worker).
    FunctionSpec(
        WORKER,
        "jobsched.handlers.worker_entry.handler",
        1024,
        MAX_TIMEOUT_SECONDS + WORKER_OVERHEAD_SECONDS,
        "jobsched worker: executes runs",
    ),
)
FUNCTIONS_BY_NAME = {f.name: f for f in FUNCTIONS}


def function_id(name: str) -> str:
    return name.capitalize() + "Function"


# --- stateful resources: fixed logical ids, so a refactor of the constructs never replaces them ---


def table_logical_id(spec: TableSpec) -> str:
    return spec.logical_id + "Table"


def queue_logical_id(key: str) -> str:
    return key.capitalize() + "Queue"


def dlq_logical_id(key: str) -> str:
    return key.capitalize() + "DeadLetterQueue"


OUTBOX_FAILURE_QUEUE_ID = "OutboxFailureQueue"
EVENTS_FAILURE_QUEUE_ID = "EventsFailureQueue"  # stream batches the events mapping gave up on
EVENT_BUS_ID = "EventBus"
# Deliveries the events consumer queues and the notifier takes (services.notifications), and
# the ones the notifier kept failing on.
NOTIFICATIONS_QUEUE_ID = "NotificationsQueue"
NOTIFICATIONS_DLQ_ID = "NotificationsDeadLetterQueue"
NOTIFIER_BATCH_SIZE = 5
NOTIFICATIONS_MAX_RECEIVES = 5  # about 30 minutes of retries (a receive every 6 minutes) before the DLQ
NOTIFIER_CONCURRENCY = 5  # the mapping's MaximumConcurrency: deliveries never crowd the workers out
TICK_FAILURE_QUEUE_ID = "TickFailures"  # ticks EventBridge could not deliver
# The reconciler's second pass each minute (store.second_ticks): a rule's pass puts its
# shard's `{"shard": n}` on this queue, which holds it SECOND_TICK_DELAY_SECONDS before its
# mapping invokes the reconciler, so every shard is reconciled twice a minute, half a minute
# apart (EventBridge rules tick at most once a minute). A message not taken within
# SECOND_TICK_RETENTION_SECONDS of being sent expires (a pass the poller took up to 90 s
# to start is still made: a late pass is harmless), and one whose pass failed is never
# received again (the visibility timeout outlasts the retention): the next tick does its work.
SECOND_TICK_QUEUE_ID = "SecondTickQueue"
SECOND_TICK_DELAY_SECONDS = 30
SECOND_TICK_RETENTION_SECONDS = 120
QUEUE_KEYS = tuple(q.key for q in QUEUES)  # every queue is drained by the worker

# --- API ---

API_STAGE = "prod"


@dataclass(frozen=True)
class Route:
    method: str
    path: str  # API Gateway resource path, {param} for path parameters
    role: str  # which example managed policy grants it

    @property
    def arn_path(self) -> str:
        """The path as it appears in an execute-api method ARN (path parameters become *)."""
        return "/".join("*" if p.startswith("{") else p for p in self.path.split("/"))


READER = "reader"
WRITER = "writer"
OPERATOR = "operator"
TRIGGER = "trigger"
REDRIVER = "redriver"
LEASE_WORKER = "worker"
API_ROLES = (READER, WRITER, OPERATOR, TRIGGER, REDRIVER, LEASE_WORKER)

ROUTES = (
    Route("GET", "/v1/jobs", READER),
    Route("POST", "/v1/jobs", WRITER),
    Route("POST", "/v1/jobs/batch", WRITER),
    Route("GET", "/v1/jobs/{id}", READER),
    Route("PATCH", "/v1/jobs/{id}", WRITER),
    Route("DELETE", "/v1/jobs/{id}", OPERATOR),
    Route("POST", "/v1/jobs/{id}/pause", OPERATOR),
    Route("POST", "/v1/jobs/{id}/resume", OPERATOR),
    Route("POST", "/v1/jobs/{id}/archive", OPERATOR),
    # Whoever may create a job (and so receives its signing secret) may rotate that secret.
    Route("POST", "/v1/jobs/{id}/signing-secret", WRITER),
    Route("GET", "/v1/jobs/{id}/runs", READER),
    Route("GET", "/v1/jobs/{id}/summary", READER),
    Route("POST", "/v1/jobs/{id}/trigger", TRIGGER),
    Route("POST", "/v1/jobs/{id}/backfill", TRIGGER),
    Route("GET", "/v1/runs/{runKey}", READER),
    Route("POST", "/v1/runs/{runKey}/redrive", REDRIVER),
    Route("POST", "/v1/runs/{runKey}/cancel", OPERATOR),
    Route("GET", "/v1/runs", READER),
    Route("GET", "/v1/dead-letters", READER),
    Route("POST", "/v1/dead-letters/redrive", REDRIVER),
    Route("POST", "/v1/dead-letters/cancel", OPERATOR),
    Route("POST", "/v1/leases", LEASE_WORKER),
    Route("POST", "/v1/leases/{runKey}/heartbeat", LEASE_WORKER),
    Route("POST", "/v1/leases/{runKey}/complete", LEASE_WORKER),
    # A schedule not saved: writes nothing, but it is a POST (the reader policy grants GETs
    # only) and a tool for writing jobs, so whoever may create a job may preview one.
    Route("POST", "/v1/schedules/preview", WRITER),
    # A tenant's calendars are part of its jobs' schedules: written by whoever writes jobs.
    Route("GET", "/v1/calendars", READER),
    Route("GET", "/v1/calendars/{name}", READER),
    Route("PUT", "/v1/calendars/{name}", WRITER),
    Route("DELETE", "/v1/calendars/{name}", WRITER),
    Route("GET", "/openapi.json", READER),
    Route("GET", "/docs", READER),
)


def policy_id(role: str) -> str:
    return "Api" + role.capitalize() + "Policy"


# --- outputs ---

OUTPUT_API_URL = "ApiUrl"
OUTPUT_API_ID = "ApiId"
OUTPUT_ALARM_TOPIC = "AlarmTopicArn"
OUTPUT_ALARM_SUBSCRIBER = "AlarmSubscriber"  # who the alarms reach, or a warning that no one does
OUTPUT_DEAD_LETTER_ALARMS = "DeadLetterAlarmNames"
OUTPUT_DASHBOARD = "DashboardName"
OUTPUT_CREATE_SCHEDULE_SM = "CreateScheduleStateMachineArn"
OUTPUT_RUN_TARGET_SM = "RunTargetStateMachineArn"
OUTPUT_WORKER_FUNCTION_ROLE = "WorkerFunctionRoleArn"  # the principals a tenant's role trusts
OUTPUT_NOTIFIER_FUNCTION_ROLE = "NotifierFunctionRoleArn"
OUTPUT_EVENT_BUS = "EventBusName"
OUTPUT_EVENT_ARCHIVE = "EventArchiveName"


def output_policy(role: str) -> str:
    return role.capitalize() + "PolicyArn"


def output_table(spec: TableSpec) -> str:
    """The output naming a table (DefinitionsTableName): what the teardown deletes, or adopts."""
    return spec.logical_id + "TableName"


REST_API_LOGICAL_ID = "JobschedApi"  # fixed so IAM policy ARNs and their nag reasons are predictable
