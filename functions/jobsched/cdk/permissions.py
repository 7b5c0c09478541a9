"""What each function may call, and why: the one table both the roles and the IAM tests use.

`CODE` lists the AWS calls the function code makes (each with the code that makes it); the
tests check every call a handler makes on moto is granted here, and every action here is
one the named code actually calls. `PLATFORM` lists what Lambda itself does with the role
(logs, traces, event source polling), which no code in the asset calls."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from jobsched.store.schema import (
    CLAIM_INDEX,
    DEAD_INDEX,
    DEFINITIONS,
    DUE_INDEX,
    OPEN_INDEX,
    RUNS,
    TENANT_INDEX,
    TENANT_RUNS_INDEX,
    TableSpec,
)

from .names import API, EVENTS, NOTIFIER, OUTBOX, QUEUE_KEYS, RECONCILER, SWEEPER, WORKER


@dataclass(frozen=True)
class Res:
    """A resource named by role, resolved to an ARN by the stack."""

    # table | index | stream | queue | dlq | outbox_failures | events_failures | event_bus | notifications
    # | second_ticks | targets | secrets | secret_keys | roles | grants_parameter
    # | log_group | any
    kind: str
    name: str = ""  # table spec logical id, queue key, or target service
    index: str = ""


def table(spec: TableSpec) -> Res:
    return Res("table", spec.logical_id)


def index(spec: TableSpec, name: str) -> Res:
    assert name in {i.name for i in spec.indexes}, f"{spec.logical_id} has no index {name}"
    return Res("index", spec.logical_id, name)


def queues(*keys: str) -> tuple[Res, ...]:
    return tuple(Res("queue", k) for k in keys)


def dlqs(*keys: str) -> tuple[Res, ...]:
    return tuple(Res("dlq", k) for k in keys)


def targets(service: str) -> Res:
    return Res("targets", service)


def secrets(service: str) -> Res:
    """The secrets (secretsmanager) or parameters (ssm) granted to some tenant (tenantTargets)."""
    return Res("secrets", service)


def secret_keys(service: str) -> Res:
    """The KMS keys that may decrypt those, limited by a condition to decrypting them only."""
    return Res("secret_keys", service)


ANY = Res("any")
ROLES = Res("roles")  # assumableRoles: the roles tenants may name
GRANTS_PARAMETER = Res("grants_parameter")
LOG_GROUP = Res("log_group")  # the function's own log group
STREAM_RUNS = Res("stream", RUNS.logical_id)
STREAM_DEFINITIONS = Res("stream", DEFINITIONS.logical_id)
OUTBOX_FAILURES = Res("outbox_failures")
EVENTS_FAILURES = Res("events_failures")
EVENT_BUS = Res("event_bus")
NOTIFICATIONS = Res("notifications")  # the notifications queue (services.notifications)
SECOND_TICKS = Res("second_ticks")  # the reconciler's delayed second tick (store.second_ticks)


@dataclass(frozen=True)
class Grant:
    actions: tuple[str, ...]
    resources: tuple[Res, ...]
    why: str
    via: tuple[str, ...] = ()  # "module:Qualname" of the code that makes the call
    # IAM conditions: ((operator, ((key, value), ...)), ...)
    conditions: tuple[tuple[str, tuple[tuple[str, str], ...]], ...] = ()
    # Only through this service, for the secrets it holds that are granted (kms:ViaService and
    # the encryption context the service puts on each secret's data key).
    decrypting_for: Literal["secretsmanager", "ssm"] | None = None


DEFS = table(DEFINITIONS)
RUNS_T = table(RUNS)
_DEF_STORE = "jobsched.store.definitions:DefinitionStore"
_RUN_STORE = "jobsched.store.runs:RunStore"
_QUEUES = "jobsched.store.queues:RunQueues"
_BATCH_GET = "jobsched.store.dynamo:batch_get"
_SLOTS = "jobsched.store.tenant_slots:TenantSlots"
# The tenant's concurrency slots (store.tenant_slots), items of the Runs table: read them,
# take one in the claim's transaction (with a ConditionCheck on the holder's run item), move,
# renew and release them. Claimers are the worker and the lease API, whose completions
# release the slot; a lease the reconciler ends is taken over once it has expired.
_TENANT_SLOTS = Grant(
    (
        "dynamodb:Query",
        "dynamodb:PutItem",
        "dynamodb:UpdateItem",
        "dynamodb:DeleteItem",
        "dynamodb:ConditionCheckItem",
    ),
    (RUNS_T,),
    "claim a run with one of its tenant's concurrency slots in one transaction, release it",
    (f"{_SLOTS}.holders", f"{_SLOTS}._transact", f"{_SLOTS}._renew_hint", f"{_SLOTS}._delete"),
)
_COMPLETER = "jobsched.services.completion:Completer"
_SECRET_READER = "jobsched.targets.secrets:SecretReader.value"
_NOTIFIER = "jobsched.services.notifications:Notifier"
_READ_GRANTS = Grant(
    ("ssm:GetParameter",),
    (GRANTS_PARAMETER,),
    "the operator's target grants, checked when a job is written and before each effect",
    ("jobsched.targets.grant_source:ParameterGrants.__call__",),
)
# A tenant's role is assumed only with its ExternalId and our SourceIdentity: a call without
# them (a bug, a role trusting the account without an ExternalId condition) is refused.
ASSUME_CONDITIONS = (
    ("Null", (("sts:ExternalId", "false"),)),
    ("StringLike", (("sts:SourceIdentity", "jobsched.*"),)),
)
# What a function that calls tenants' targets (the worker's runs, the notifier's
# notifications) reads and assumes for them: HTTP headers referenced by ARN, and the roles
# tenants name.
_TENANT_SECRETS_AND_ROLES = (
    Grant(
        ("secretsmanager:GetSecretValue",),
        (secrets("secretsmanager"),),
        "HTTP headers (run targets, webhooks) referenced by ARN: the secrets granted to tenants",
        (_SECRET_READER, "aws_lambda_powertools.utilities.parameters.secrets:SecretsProvider._get"),
    ),
    Grant(
        ("ssm:GetParameter",),
        (secrets("ssm"),),
        "HTTP headers (run targets, webhooks) referenced by ARN: the parameters granted to tenants",
        (_SECRET_READER, "aws_lambda_powertools.utilities.parameters.ssm:SSMProvider._get"),
    ),
    Grant(
        ("sts:AssumeRole", "sts:SetSourceIdentity"),
        (ROLES,),
        "the roles tenants name (context assumableRoles), only with the tenant's ExternalId "
        "and a jobsched SourceIdentity; each role's trust policy decides which tenant",
        ("jobsched.targets.roles:AssumedRoles._assume",),
        ASSUME_CONDITIONS,
    ),
)
# Secrets Manager and SSM decrypt a customer-managed key's data with the caller's identity:
# allowed through that service only, for the granted secrets only.
_DECRYPT_TENANT_SECRETS = (
    Grant(
        ("kms:Decrypt",),
        (secret_keys("secretsmanager"),),
        "Secrets Manager decrypts a granted secret kept under a customer-managed key",
        decrypting_for="secretsmanager",
    ),
    Grant(
        ("kms:Decrypt",),
        (secret_keys("ssm"),),
        "SSM decrypts a granted SecureString parameter kept under a customer-managed key",
        decrypting_for="ssm",
    ),
)
_DEAD_COPY = Grant(
    ("sqs:SendMessage",),
    dlqs(*QUEUE_KEYS),
    "a copy of every run that dies, on its priority's DLQ, so the dead-letter alarm fires",
    (f"{_QUEUES}.dead_letter", f"{_COMPLETER}.after"),
)

CODE: dict[str, tuple[Grant, ...]] = {
    API: (
        Grant(
            ("dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem"),
            (DEFS,),
            "read, create (with its idempotency guard in one transaction) and change jobs; "
            "job counters and their fold; materialising at write time advances the job; the "
            "definition an update replaces, kept for the runs made before it, and read for them; "
            "an ended job's expiry given to its counters and signing secrets",
            (
                f"{_DEF_STORE}.get",
                f"{_DEF_STORE}.get_guard",
                f"{_DEF_STORE}.counters",
                f"{_DEF_STORE}.save_fold",
                f"{_DEF_STORE}.create",
                f"{_DEF_STORE}._create_group",
                f"{_DEF_STORE}.save",
                f"{_DEF_STORE}._expire_with_job",
                f"{_DEF_STORE}.add_stats",
                f"{_DEF_STORE}.save_definition",
                f"{_DEF_STORE}.definition",
            ),
        ),
        Grant(
            ("dynamodb:DeleteItem",),
            (DEFS,),
            "delete a tenant's calendar with its user count, in one transaction conditioned on"
            " no live job referencing it",
            (
                "jobsched.store.calendars:CalendarStore.delete",
                "jobsched.store.calendars:CalendarStore._transact",
            ),
        ),
        Grant(
            ("dynamodb:Query",),
            (index(DEFINITIONS, TENANT_INDEX),),
            "list a tenant's jobs",
            (f"{_DEF_STORE}.list_for_tenant",),
        ),
        Grant(
            ("dynamodb:BatchGetItem",),
            (DEFS, RUNS_T),
            "read the jobs and runs found in the keys-only tenant and claimable indexes, and the "
            "open runs a job's counters' fold reads again",
            (
                f"{_DEF_STORE}.list_for_tenant",
                f"{_RUN_STORE}.claimable",
                f"{_RUN_STORE}.get_many",
                _BATCH_GET,
            ),
        ),
        Grant(
            ("dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem", "dynamodb:Query"),
            (RUNS_T,),
            "runs of a job, one run, trigger, backfill, redrive and cancel (conditional writes), "
            "a new job's first runs (written in its creation's transaction), "
            "and the external workers' lease protocol (claim, heartbeat, complete under the fence)",
            (
                f"{_DEF_STORE}._create_group",
                f"{_RUN_STORE}.get",
                f"{_RUN_STORE}.list_for_job",
                f"{_RUN_STORE}.runs_after",
                f"{_RUN_STORE}.insert",
                f"{_RUN_STORE}._put",
                f"{_RUN_STORE}.extend_lease",
            ),
        ),
        Grant(
            ("dynamodb:Query",),
            (index(RUNS, DEAD_INDEX), index(RUNS, CLAIM_INDEX), index(RUNS, TENANT_RUNS_INDEX)),
            "a tenant's dead letters; due target-less runs an external worker may lease; a tenant's"
            " runs across its jobs",
            (f"{_RUN_STORE}.list_dead", f"{_RUN_STORE}.claimable", f"{_RUN_STORE}._read_lane"),
        ),
        _TENANT_SLOTS,
        _DEAD_COPY,
        _READ_GRANTS,
    ),
    SWEEPER: (
        Grant(
            ("dynamodb:Query",),
            (index(DEFINITIONS, DUE_INDEX),),
            "jobs of a shard due within the horizon",
            (f"{_DEF_STORE}.due_jobs",),
        ),
        Grant(
            ("dynamodb:BatchGetItem",),
            (DEFS,),
            "read the jobs the keys-only due index found",
            (f"{_DEF_STORE}.due_jobs", _BATCH_GET),
        ),
        Grant(
            ("dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem"),
            (DEFS,),
            "advance the job (rev-conditioned), re-read it after a lost race, count skipped "
            "occurrences, fold the job's runs into its counters; a completed job's expiry given "
            "to its counters and signing secrets",
            (
                f"{_DEF_STORE}.save",
                f"{_DEF_STORE}._expire_with_job",
                f"{_DEF_STORE}.get",
                f"{_DEF_STORE}.add_stats",
                f"{_DEF_STORE}.counters",
                f"{_DEF_STORE}.save_fold",
            ),
        ),
        Grant(
            ("dynamodb:PutItem",),
            (RUNS_T,),
            "write each run with attribute_not_exists",
            (f"{_RUN_STORE}.insert",),
        ),
        Grant(
            ("dynamodb:Query",),
            (RUNS_T,),
            "the runs already holding occurrences of a SKIPPED range whose record was refused; "
            "a job's runs after its counters' fold mark",
            (f"{_RUN_STORE}.occurrences_held", f"{_RUN_STORE}.runs_after"),
        ),
        Grant(
            ("dynamodb:BatchGetItem",),
            (RUNS_T,),
            "the open runs a job's counters' fold reads again",
            (f"{_RUN_STORE}.get_many", _BATCH_GET),
        ),
    ),
    OUTBOX: (
        Grant(
            ("dynamodb:PutItem",),
            (RUNS_T,),
            "mark the published run QUEUED (rev-conditioned)",
            (f"{_RUN_STORE}._put",),
        ),
        Grant(
            ("sqs:SendMessage",),
            queues(*QUEUE_KEYS),
            "SendMessageBatch of due runs to their priority queue",
            (f"{_QUEUES}.publish",),
        ),
    ),
    EVENTS: (
        Grant(
            ("events:PutEvents",),
            (EVENT_BUS,),
            "publish run and job events to the stack's bus",
            ("jobsched.services.events:EventPublisher._put",),
        ),
        Grant(
            ("sqs:SendMessage",),
            (NOTIFICATIONS,),
            "SendMessageBatch of the notification deliveries a run's events ask for",
            ("jobsched.services.notifications:NotificationQueue._send",),
        ),
        Grant(
            ("sqs:SendMessage",),
            (EVENTS_FAILURES,),
            "keep a record that could not deliver its events or deliveries for minutes, to replay",
            ("jobsched.services.record_delivery:SetAsideQueue._send",),
        ),
    ),
    NOTIFIER: (
        # The same targets, secrets and roles as the worker's: a notification's target is
        # authorised as a run's is (the grants checked again before each delivery).
        Grant(
            ("sns:Publish",),
            (targets("sns"),),
            "SNS topics granted to some tenant (context tenantTargets)",
            (f"{_NOTIFIER}._send",),
        ),
        Grant(
            ("sqs:SendMessage",),
            (targets("sqs"),),
            "SQS queues granted to some tenant (context tenantTargets)",
            (f"{_NOTIFIER}._send",),
        ),
        Grant(
            ("events:PutEvents",),
            (targets("events"),),
            "EventBridge buses granted to some tenant (context tenantTargets)",
            (f"{_NOTIFIER}._put_event",),
        ),
        Grant(
            ("dynamodb:GetItem",),
            (DEFS,),
            "the job's signing secret, which signs a webhook notification",
            (f"{_DEF_STORE}.get", f"{_DEF_STORE}.signing_secrets"),
        ),
        _READ_GRANTS,
        *_TENANT_SECRETS_AND_ROLES,
    ),
    RECONCILER: (
        Grant(
            ("dynamodb:Query",),
            (index(RUNS, OPEN_INDEX),),
            "open runs past their repair deadline",
            (f"{_RUN_STORE}.overdue_keys",),
        ),
        Grant(
            ("dynamodb:BatchGetItem",),
            (RUNS_T,),
            "read the runs found in the keys-only open index",
            (f"{_RUN_STORE}.read_keys", _BATCH_GET),
        ),
        Grant(
            ("dynamodb:GetItem", "dynamodb:PutItem"),
            (RUNS_T,),
            "re-touch, requeue or expire a run (rev-conditioned); read the run a buffered one waits on",
            (f"{_RUN_STORE}._put", f"{_RUN_STORE}.get"),
        ),
        Grant(
            ("sqs:SendMessage",),
            queues(*QUEUE_KEYS),
            "SendMessageBatch of the runs it repaired, as the outbox sends them (marked QUEUED first)",
            (f"{_QUEUES}.publish",),
        ),
        Grant(
            ("dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem"),
            (DEFS,),
            "a dead run's job counter and pause-on-failure; the shard count in use",
            (
                f"{_DEF_STORE}.add_stats",
                f"{_DEF_STORE}.get",
                f"{_DEF_STORE}.save",
                f"{_DEF_STORE}.recorded_shard_count",
            ),
        ),
        _DEAD_COPY,
        Grant(
            ("sqs:SendMessage",),
            (SECOND_TICKS,),
            "a rule's pass sends its shard's second tick of the minute, which the queue delays",
            ("jobsched.store.second_ticks:SecondTicks.send",),
        ),
    ),
    WORKER: (
        Grant(
            ("dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem"),
            (RUNS_T,),
            "claim with a fence, heartbeat, save the effect's result and complete under the fence",
            (f"{_RUN_STORE}.get", f"{_RUN_STORE}._put", f"{_RUN_STORE}.extend_lease"),
        ),
        _TENANT_SLOTS,
        Grant(
            ("dynamodb:GetItem", "dynamodb:PutItem", "dynamodb:UpdateItem"),
            (DEFS,),
            "check the job before the effect, pause it on failure, count outcomes; the "
            "definition of an earlier version a run made from it runs with",
            (
                f"{_DEF_STORE}.get",
                f"{_DEF_STORE}.save",
                f"{_DEF_STORE}.add_stats",
                f"{_DEF_STORE}.definition",
            ),
        ),
        Grant(
            ("sqs:ChangeMessageVisibility",),
            queues(*QUEUE_KEYS),
            "defer a run in place; the heartbeat keeps the message invisible while the lease lives; "
            "an invocation holds its batch's messages before the worker loads, then for the lease",
            (
                f"{_QUEUES}.change_visibility",
                f"{_QUEUES}.change_visibility_batch",
                "jobsched.handlers.worker_entry:hold",
            ),
        ),
        _DEAD_COPY,
        _READ_GRANTS,
        Grant(
            ("lambda:InvokeFunction",),
            (targets("lambda"),),
            "Lambda targets granted to some tenant (context tenantTargets)",
            ("jobsched.targets.aws_targets:invoke_lambda",),
        ),
        Grant(
            ("sqs:SendMessage",),
            (targets("sqs"),),
            "SQS targets granted to some tenant (context tenantTargets)",
            ("jobsched.targets.aws_targets:send_sqs",),
        ),
        Grant(
            ("events:PutEvents",),
            (targets("events"),),
            "EventBridge buses granted to some tenant (context tenantTargets)",
            ("jobsched.targets.aws_targets:put_event",),
        ),
        Grant(
            ("states:StartExecution",),
            (targets("states"),),
            "Step Functions targets granted to some tenant (context tenantTargets, and the "
            "example machine to the example's caller)",
            ("jobsched.targets.aws_targets:start_execution",),
        ),
        *_TENANT_SECRETS_AND_ROLES,
    ),
}

_LOGS = Grant(("logs:CreateLogStream", "logs:PutLogEvents"), (LOG_GROUP,), "the function's own log group")
# X-Ray has no resource-level permissions.
_TRACES = Grant(("xray:PutTraceSegments", "xray:PutTelemetryRecords"), (ANY,), "active tracing")

PLATFORM: dict[str, tuple[Grant, ...]] = {
    API: (_LOGS, _TRACES),
    SWEEPER: (_LOGS, _TRACES),
    RECONCILER: (
        _LOGS,
        _TRACES,
        Grant(
            ("sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:GetQueueAttributes"),
            (SECOND_TICKS,),
            "the event source mapping polls the queue that delays the second tick of each minute",
        ),
    ),
    OUTBOX: (
        _LOGS,
        _TRACES,
        Grant(
            ("dynamodb:DescribeStream", "dynamodb:GetRecords", "dynamodb:GetShardIterator"),
            (STREAM_RUNS,),
            "the event source mapping reads the Runs stream",
        ),
        # ListStreams takes no resource ARN.
        Grant(("dynamodb:ListStreams",), (ANY,), "the event source mapping finds the stream"),
        Grant(
            ("sqs:SendMessage",),
            (OUTBOX_FAILURES,),
            "the mapping's on-failure destination for batches it gives up on",
        ),
    ),
    EVENTS: (
        _LOGS,
        _TRACES,
        Grant(
            ("dynamodb:DescribeStream", "dynamodb:GetRecords", "dynamodb:GetShardIterator"),
            (STREAM_RUNS, STREAM_DEFINITIONS),
            "the event source mappings read the Runs and Definitions streams",
        ),
        Grant(("dynamodb:ListStreams",), (ANY,), "the event source mappings find the streams"),
        Grant(
            ("sqs:SendMessage",),
            (EVENTS_FAILURES,),
            "the mappings' on-failure destination for batches they give up on",
        ),
    ),
    NOTIFIER: (
        _LOGS,
        _TRACES,
        Grant(
            ("sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:GetQueueAttributes"),
            (NOTIFICATIONS,),
            "the event source mapping polls the notifications queue",
        ),
        *_DECRYPT_TENANT_SECRETS,
    ),
    WORKER: (
        _LOGS,
        _TRACES,
        Grant(
            ("sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:GetQueueAttributes"),
            queues(*QUEUE_KEYS),
            "the event source mappings poll the priority queues",
        ),
        *_DECRYPT_TENANT_SECRETS,
    ),
}


def grants(function: str) -> tuple[Grant, ...]:
    return CODE[function] + PLATFORM[function]
