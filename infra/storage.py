"""Definitions, Runs and Idempotency tables, built from jobsched.store.schema."""

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
_STREAMS = {"NEW_AND_OLD_IMAGES": dynamodb.StreamViewType.NEW_AND_OLD_IMAGES}


def _attribute(key: Key | None) -> dynamodb.Attribute | None:
    return dynamodb.Attribute(name=key.name, type=_TYPES[key.type]) if key else None


class Storage(Construct):
    def __init__(self, scope: Construct, construct_id: str, *, retain: bool) -> None:
        super().__init__(scope, construct_id)
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
            billing_mode=dynamodb.BillingMode.PAY_PER_REQUEST,
            point_in_time_recovery_specification=dynamodb.PointInTimeRecoverySpecification(
                point_in_time_recovery_enabled=True
            ),
            encryption=dynamodb.TableEncryption.AWS_MANAGED,
            stream=_STREAMS[spec.stream] if spec.stream else None,
            time_to_live_attribute=spec.ttl_attribute,
            deletion_protection=retain,
            removal_policy=RemovalPolicy.RETAIN if retain else RemovalPolicy.DESTROY,
        )
        for index in spec.indexes:
            table.add_global_secondary_index(
                index_name=index.name,
                partition_key=_attribute(index.partition),  # type: ignore[arg-type]
                sort_key=_attribute(index.sort),
                projection_type=_PROJECTIONS[index.projection],
                non_key_attributes=list(index.include) if index.projection == "INCLUDE" else None,
            )
        # A fixed logical id: renaming a construct must never replace a table.
        table.node.default_child.override_logical_id(table_logical_id(spec))  # type: ignore[union-attr]
        return table
