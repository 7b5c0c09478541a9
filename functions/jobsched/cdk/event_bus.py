"""The bus run and job events go to (handlers.events), and its archive.

The archive keeps every jobsched event for `eventArchiveDays` (0: indefinitely), so the audit
trail outlives the Runs table's retention; a window of it can be replayed to the bus (or to a
rule of it) with StartReplay (docs/concepts/events.md)."""

from __future__ import annotations

import hashlib

from aws_cdk import Duration
from aws_cdk import aws_events as events
from constructs import Construct

from jobsched.domain.events import SOURCE_PREFIX

from .config import Config
from .names import EVENT_BUS_ID

MAX_ARCHIVE_NAME = 48  # EventBridge's limit (CloudFormation's generated names pass it)


def archive_name(stack_name: str) -> str:
    """`<stack, cut to 24>-<8 hex of the whole stack name>-events`: within the 48 characters
    EventBridge allows, and unique per stack (a region's stack names are)."""
    digest = hashlib.sha256(stack_name.encode()).hexdigest()[:8]
    return f"{stack_name[:24]}-{digest}-events"


class EventBus(Construct):
    """`name`: the scheduler's (names.Naming), which the archive's name is made of;
    `logical_prefix` goes before the bus's fixed logical id."""

    def __init__(
        self, scope: Construct, construct_id: str, *, config: Config, name: str, logical_prefix: str = ""
    ) -> None:
        super().__init__(scope, construct_id)
        self.bus = events.EventBus(self, EVENT_BUS_ID, description="jobsched run and job events")
        # A fixed logical id, as for the tables and queues: a refactor never replaces the bus.
        self.bus.node.default_child.override_logical_id(logical_prefix + EVENT_BUS_ID)  # type: ignore[union-attr]
        days = config.event_archive_days
        self.archive = self.bus.archive(
            "Archive",
            archive_name=archive_name(name),
            description="every jobsched run and job event, replayable",
            event_pattern=events.EventPattern(source=events.Match.prefix(SOURCE_PREFIX)),
            retention=Duration.days(days) if days else None,
        )
        # The L2 writes KmsKeyIdentifier "" when no key is given (aws/aws-cdk#37847), which
        # CloudFormation refuses in some regions: without a key the property is left out, and
        # the archive uses an AWS-owned key.
        archive = self.archive.node.default_child
        archive.add_property_deletion_override("KmsKeyIdentifier")  # type: ignore[union-attr]
