"""The one definition of every table's keys, indexes, stream and TTL.

The CDK stack, local mode and the tests all build their tables from these specs, so a
key schema can never drift between what is deployed and what the code queries."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

AttrType = Literal["S", "N"]


@dataclass(frozen=True)
class Key:
    name: str
    type: AttrType


@dataclass(frozen=True)
class Index:
    name: str
    partition: Key
    sort: Key | None = None
    # ALL copies the whole item into the index, so every write of the item is written again
    # there; KEYS_ONLY/INCLUDE indexes are written only when their keys or included attributes change.
    projection: Literal["ALL", "KEYS_ONLY", "INCLUDE"] = "ALL"
    include: tuple[str, ...] = ()  # non-key attributes projected by INCLUDE


@dataclass(frozen=True)
class TableSpec:
    logical_id: str  # construct id in CDK
    env_var: str  # environment variable carrying the physical name to the functions
    default_name: str  # physical name in local mode and tests
    partition: Key
    sort: Key | None = None
    indexes: tuple[Index, ...] = field(default_factory=tuple)
    stream: Literal["NEW_AND_OLD_IMAGES"] | None = None
    ttl_attribute: str | None = None

    def key_attributes(self) -> dict[str, AttrType]:
        attrs: dict[str, AttrType] = {}
        for key in (self.partition, self.sort):
            if key:
                attrs[key.name] = key.type
        for index in self.indexes:
            for key in (index.partition, index.sort):
                if key:
                    attrs[key.name] = key.type
        return attrs

    def create_table_request(self, table_name: str | None = None) -> dict[str, Any]:
        """Arguments for DynamoDB CreateTable (moto and local mode)."""
        request: dict[str, Any] = {
            "TableName": table_name or self.default_name,
            "BillingMode": "PAY_PER_REQUEST",
            "AttributeDefinitions": [
                {"AttributeName": n, "AttributeType": t} for n, t in self.key_attributes().items()
            ],
            "KeySchema": _key_schema(self.partition, self.sort),
        }
        if self.indexes:
            request["GlobalSecondaryIndexes"] = [
                {
                    "IndexName": index.name,
                    "KeySchema": _key_schema(index.partition, index.sort),
                    "Projection": _projection(index),
                }
                for index in self.indexes
            ]
        if self.stream:
            request["StreamSpecification"] = {"StreamEnabled": True, "StreamViewType": self.stream}
        return request


def _projection(index: Index) -> dict[str, Any]:
    projection: dict[str, Any] = {"ProjectionType": index.projection}
    if index.projection == "INCLUDE":
        projection["NonKeyAttributes"] = list(index.include)
    return projection


def _key_schema(partition: Key, sort: Key | None) -> list[dict[str, str]]:
    schema = [{"AttributeName": partition.name, "KeyType": "HASH"}]
    if sort:
        schema.append({"AttributeName": sort.name, "KeyType": "RANGE"})
    return schema


# Definitions: one item per job, plus idempotency guard items (job_id = "guard#...").
DUE_INDEX = "due"
TENANT_INDEX = "by_tenant"
DEFINITIONS = TableSpec(
    logical_id="Definitions",
    env_var="DEFINITIONS_TABLE",
    default_name="jobsched-definitions",
    partition=Key("job_id", "S"),
    indexes=(
        # Sparse: due_shard is present only while the job is ACTIVE with a next occurrence.
        # Keys only: every advance of a job moves its next_run_at, so the index row is
        # rewritten each occurrence; with ALL that is the whole item (up to 400 KB, one write
        # unit a KB), keys only it is one unit. The sweeper reads the jobs it finds by key.
        Index(DUE_INDEX, Key("due_shard", "N"), Key("next_run_at", "S"), "KEYS_ONLY"),
        # Listing filters on state and then reads the jobs themselves: a job advanced by the
        # sweeper every occurrence changes neither, so the index is not rewritten with it.
        Index(TENANT_INDEX, Key("tenant", "S"), Key("created_at", "S"), "INCLUDE", ("state",)),
    ),
    # The events consumer's (handlers.events): a job's control-plane changes become job
    # events. Adding a stream to a table is an update without interruption; the sweeper's
    # advances are records too, which the consumer's code tells apart (no version or state
    # change) after its filter has kept job items only.
    stream="NEW_AND_OLD_IMAGES",
    # Guard, rate and superseded-definition items, and ended jobs with their counters and
    # signing secrets (services.definitions.ended_job_expiry).
    ttl_attribute="expires_at",
)

# Runs: R#<scheduled_for> for a run, T#<scheduled_for>#<seq> for its transitions.
# Partition slots#<sha256 of a tenant>, S#<n>: that tenant's concurrency slots
# (store.tenant_slots); no index, TTL, listing or stream filter picks them up.
OPEN_INDEX = "open"
DEAD_INDEX = "dead_by_tenant"
CLAIM_INDEX = "claimable"
# Retired: no run item carries `leased_tenant` any more, so the index stays empty and costs no
# write; it is deleted by a later release, alone (CloudFormation takes one index creation or
# deletion per table update, and `runs_by_tenant` is this release's).
LEASED_INDEX = "leased_by_tenant"
RETIRED_INDEXES = frozenset({LEASED_INDEX})
TENANT_RUNS_INDEX = "runs_by_tenant"
RUNS = TableSpec(
    logical_id="Runs",
    env_var="RUNS_TABLE",
    default_name="jobsched-runs",
    partition=Key("job_id", "S"),
    sort=Key("sk", "S"),
    indexes=(
        # Sparse: open_shard is present only while the run is open; deadline_at is when
        # the reconciler must look at it if nothing else has moved it on. Keys only: the
        # reconciler reads the runs it finds, so transitions do not rewrite the index.
        Index(OPEN_INDEX, Key("open_shard", "N"), Key("deadline_at", "S"), "KEYS_ONLY"),
        # Sparse: dead_tenant is present only while the run is DEAD.
        Index(DEAD_INDEX, Key("dead_tenant", "S"), Key("dead_at", "S")),
        # Sparse: claim_key = "<tenant>#<type>" is present while a run without a target waits
        # to be claimed; external workers lease from it through the API (reading the runs).
        Index(CLAIM_INDEX, Key("claim_key", "S"), Key("due_at", "S"), "KEYS_ONLY"),
        # Retired (RETIRED_INDEXES): nothing writes its key any more.
        Index(LEASED_INDEX, Key("leased_tenant", "S"), Key("lease_expires_at", "S"), "KEYS_ONLY"),
        # Every run, by tenant lane ("<tenant>#<n>", domain.run_listing) newest first: the
        # listing across a tenant's jobs. Keys only, and neither key changes after the run is
        # made, so its entry is written once (one unit) and never by a transition; a listing
        # reads the runs it names by key.
        Index(TENANT_RUNS_INDEX, Key("run_lane", "S"), Key("run_order", "S"), "KEYS_ONLY"),
    ),
    stream="NEW_AND_OLD_IMAGES",
    ttl_attribute="expires_at",
)

# The bus run and job events go to (handlers.events, domain.events); the stack names it.
EVENT_BUS_NAME = "jobsched-events"

# No idempotency table: the worker's Powertools idempotency records live on the run item
# (store.run_idempotency).
ALL_TABLES = (DEFINITIONS, RUNS)


# --- Queues: one per priority, each with its DLQ. External workers lease target-less runs
# through the API from the `claimable` index instead of a shared queue, so one tenant's
# backlog can never sit in front of another's.


@dataclass(frozen=True)
class QueueSpec:
    key: str  # high | default | low
    env_var: str  # carries the queue URL to the functions
    dlq_env_var: str
    default_name: str
    visibility_timeout: int = 360  # seconds; the worker extends it while a run executes
    # Worker invocations this queue's event source mapping runs at once (MaximumConcurrency):
    # the stack's default for `workerConcurrency`, and what local mode's glue allows.
    max_concurrency: int = 10
    # A message's receives are spent two ways. The worker defers a run (not due yet, tenant at
    # its limit, buffered behind a running run) or keeps the message of a run whose holder
    # never renewed its lease by leaving it in the queue for the delay, which costs a
    # receive; it does so only while the receive count is at most
    # `deferral_receives`, and past that hands the run to the outbox (PENDING with the
    # instant to look again), which publishes a fresh message. So the last
    # `failure_receives` receives before the DLQ are always failures, never deferrals.
    deferral_receives: int = 5
    failure_receives: int = 5  # AWS's minimum maxReceiveCount for a Lambda event source

    @property
    def max_receive_count(self) -> int:
        """Deliveries before SQS moves a message to the DLQ."""
        return self.deferral_receives + self.failure_receives

    @property
    def dlq_name(self) -> str:
        return self.default_name + "-dlq"


QUEUES = tuple(
    QueueSpec(
        key,
        f"{key.upper()}_QUEUE_URL",
        f"{key.upper()}_DLQ_URL",
        f"jobsched-{key}",
        max_concurrency=concurrency,
    )
    # Ceilings, not reservations: 175 workers run ~190,000 runs/min (bench/report.md, capacity).
    for key, concurrency in (("high", 50), ("default", 100), ("low", 25))
)
