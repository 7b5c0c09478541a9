"""Definitions and Runs tables, built from jobsched.store.schema."""

from __future__ import annotations

from aws_cdk import RemovalPolicy
from aws_cdk import aws_dynamodb as dynamodb
from constructs import Construct

from jobsched.store.schema import ALL_TABLES, Key, TableSpec

from .names import table_logical_id

_TYPES = {"S": dynamodb.AttributeType.STRING, "N": dynamodb.AttributeType.NUMBER}
_PROJECTIONS = {
    "ALL": dynamodb.ProjectionType.ALL,
    "KEYS_ONLY": dynamodb.ProjectionType.KEYS_ONLY,
    "INCLUDE": dynamodb.ProjectionType.INCLUDE,
}
_BILLING = {False: dynamodb.BillingMode.PAY_PER_REQUEST, True: dynamodb.BillingMode.PROVISIONED}
_STREAMS = {"NEW_AND_OLD_IMAGES": dynamodb.StreamViewType.NEW_AND_OLD_IMAGES}


def _warm(read: int, write: int) -> dynamodb.WarmThroughput | None:
    if not (read or write):
        return None
    return dynamodb.WarmThroughput(read_units_per_second=read or None, write_units_per_second=write or None)


def _attribute(key: Key | None) -> dynamodb.Attribute | None:
    return dynamodb.Attribute(name=key.name, type=_TYPES[key.type]) if key else None


class Storage(Construct):
    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        retain: bool,
        provisioned: dict[str, int] | None = None,
        warm_throughput: dict[str, int] | None = None,
        on_demand_throughput: dict[str, int] | None = None,
        logical_prefix: str = "",
    ) -> None:
        """`provisioned`: auto-scaled capacity (min/max read and write, target utilisation)
        for every table and index; None is on-demand. `warm_throughput` (read, write,
        indexRead, indexWrite) and `on_demand_throughput` (maxRead, maxWrite, on-demand only)
        apply to every table and index; a 0 leaves AWS's default. `logical_prefix` goes before
        each table's fixed logical id (names.Naming)."""
        super().__init__(scope, construct_id)
        self._prefix = logical_prefix
        self._provisioned = provisioned
        warm = warm_throughput or {}
        self._warm = _warm(warm.get("read", 0), warm.get("write", 0))
        self._index_warm = _warm(warm.get("indexRead", 0), warm.get("indexWrite", 0))
        on_demand = on_demand_throughput or {}
        self._max_read = on_demand.get("maxRead") or None
        self._max_write = on_demand.get("maxWrite") or None
        self.tables: dict[str, dynamodb.Table] = {}
        for spec in ALL_TABLES:
            self.tables[spec.logical_id] = self._table(spec, retain)

    def table(self, spec: TableSpec) -> dynamodb.Table:
        return self.tables[spec.logical_id]

    def _table(self, spec: TableSpec, retain: bool) -> dynamodb.Table:
        table = dynamodb.Table(
            self,
            spec.logical_id,
            partition_key=_attribute(spec.partition),
            sort_key=_attribute(spec.sort),
            billing_mode=_BILLING[bool(self._provisioned)],
            read_capacity=self._provisioned["minRead"] if self._provisioned else None,
            write_capacity=self._provisioned["minWrite"] if self._provisioned else None,
            point_in_time_recovery_specification=dynamodb.PointInTimeRecoverySpecification(
                point_in_time_recovery_enabled=True
            ),
            encryption=dynamodb.TableEncryption.AWS_MANAGED,
            stream=_STREAMS[spec.stream] if spec.stream else None,
            time_to_live_attribute=spec.ttl_attribute,
            deletion_protection=retain,
            removal_policy=RemovalPolicy.RETAIN if retain else RemovalPolicy.DESTROY,
            warm_throughput=self._warm,
            max_read_request_units=self._max_read,
            max_write_request_units=self._max_write,
        )
        for index in spec.indexes:
            table.add_global_secondary_index(
                index_name=index.name,
                partition_key=_attribute(index.partition),
                sort_key=_attribute(index.sort),
                projection_type=_PROJECTIONS[index.projection],
                non_key_attributes=list(index.include) if index.projection == "INCLUDE" else None,
                read_capacity=self._provisioned["minRead"] if self._provisioned else None,
                write_capacity=self._provisioned["minWrite"] if self._provisioned else None,
                warm_throughput=self._index_warm,
                max_read_request_units=self._max_read,
                max_write_request_units=self._max_write,
            )
        if self._provisioned:
            self._autoscale(table, spec)
        # A fixed logical id: renaming a construct must never replace a table.
        table.node.default_child.override_logical_id(self._prefix + table_logical_id(spec))  # type: ignore[union-attr]
        return table

    def _autoscale(self, table: dynamodb.Table, spec: TableSpec) -> None:
        """Target tracking on utilisation, for the table and each of its indexes (each is
        throttled on its own capacity)."""
        assert self._provisioned is not None
        capacity = self._provisioned
        target = capacity["targetUtilization"]
        table.auto_scale_read_capacity(
            min_capacity=capacity["minRead"], max_capacity=capacity["maxRead"]
        ).scale_on_utilization(target_utilization_percent=target)
        table.auto_scale_write_capacity(
            min_capacity=capacity["minWrite"], max_capacity=capacity["maxWrite"]
        ).scale_on_utilization(target_utilization_percent=target)
        for index in spec.indexes:
            table.auto_scale_global_secondary_index_read_capacity(
                index.name, min_capacity=capacity["minRead"], max_capacity=capacity["maxRead"]
            ).scale_on_utilization(target_utilization_percent=target)
            table.auto_scale_global_secondary_index_write_capacity(
                index.name, min_capacity=capacity["minWrite"], max_capacity=capacity["maxWrite"]
            ).scale_on_utilization(target_utilization_percent=target)
