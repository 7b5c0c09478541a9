"""Names shared by the stack and its tests: construct ids, logical ids, handlers, routes, outputs.

Table keys, indexes and queue settings are not here: they come from jobsched.store.schema."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from jobsched.domain.models import MAX_TIMEOUT_SECONDS
from jobsched.services.worker import WORKER_OVERHEAD_SECONDS
from jobsched.store.schema import QUEUES, TableSpec

ROOT = Path(__file__).resolve().parent.parent
FUNCTIONS_DIR = ROOT / "functions"
LAYERS_DIR = ROOT / "layers"
LAYER_REQUIREMENTS = LAYERS_DIR / "requirements.txt"
LAYER_BUILD_DIR = LAYERS_DIR / "build"

STACK_ID = "Jobsched"
SERVICE = "jobsched"  # Powertools service and metric namespace (jobsched.observability)

# Lambda runtime and architecture; the layer is built for exactly these.
PYTHON_VERSION = "3.13"
PIP_PLATFORM = "manylinux2014_aarch64"

# The function asset is one package, the runtime; local mode, the CLI and the chaos harness are
# packages of their own beside it (functions/jobsched_local, functions/jobsched_cli, chaos/), so
# nothing has to be left out of it but bytecode. The patterns keep the asset to that package.
RUNTIME_PACKAGE = "jobsched"
CODE_ASSET_PATTERNS = (
    "*",
    "!" + RUNTIME_PACKAGE,
    "!" + RUNTIME_PACKAGE + "/**",
    "**/__pycache__",
    "**/*.pyc",
)

# --- functions ---

API = "api"
SWEEPER = "sweeper"
OUTBOX = "outbox"
RECONCILER = "reconciler"
WORKER = "worker"


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
    # The longest effect a job may ask for plus the worker's own overhead: 840 + 60 = 900 s,
    # Lambda's maximum; a batch's records run at once, each with its full timeoutSeconds.
    # The queues' visibility timeout is six times this (infra.queues.WORKER_QUEUE_VISIBILITY).
    FunctionSpec(
        WORKER,
        "jobsched.handlers.worker.handler",
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
    Route("GET", "/v1/jobs/{id}", READER),
    Route("PATCH", "/v1/jobs/{id}", WRITER),
    Route("DELETE", "/v1/jobs/{id}", OPERATOR),
    Route("POST", "/v1/jobs/{id}/pause", OPERATOR),
    Route("POST", "/v1/jobs/{id}/resume", OPERATOR),
    Route("GET", "/v1/jobs/{id}/runs", READER),
    Route("GET", "/v1/jobs/{id}/summary", READER),
    Route("POST", "/v1/jobs/{id}/trigger", TRIGGER),
    Route("POST", "/v1/jobs/{id}/backfill", TRIGGER),
    Route("GET", "/v1/runs/{runKey}", READER),
    Route("POST", "/v1/runs/{runKey}/redrive", REDRIVER),
    Route("POST", "/v1/runs/{runKey}/cancel", OPERATOR),
    Route("GET", "/v1/dead-letters", READER),
    Route("POST", "/v1/leases", LEASE_WORKER),
    Route("POST", "/v1/leases/{runKey}/heartbeat", LEASE_WORKER),
    Route("POST", "/v1/leases/{runKey}/complete", LEASE_WORKER),
    Route("GET", "/openapi.json", READER),
    Route("GET", "/docs", READER),
)


def policy_id(role: str) -> str:
    return "Api" + role.capitalize() + "Policy"


# --- outputs ---

OUTPUT_API_URL = "ApiUrl"
OUTPUT_API_ID = "ApiId"
OUTPUT_ALARM_TOPIC = "AlarmTopicArn"
OUTPUT_DEAD_LETTER_ALARMS = "DeadLetterAlarmNames"
OUTPUT_DASHBOARD = "DashboardName"
OUTPUT_CREATE_SCHEDULE_SM = "CreateScheduleStateMachineArn"
OUTPUT_RUN_TARGET_SM = "RunTargetStateMachineArn"


def output_policy(role: str) -> str:
    return role.capitalize() + "PolicyArn"


REST_API_LOGICAL_ID = "JobschedApi"  # fixed so IAM policy ARNs and their nag reasons are predictable
