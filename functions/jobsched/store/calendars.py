"""Tenants' named calendars, as items of the Definitions table.

Three kinds of item, each keyed by a SHA-256 digest, so a key is under 80 bytes whatever
the tenant id or name, can never be a job's (`j_…`), and a tenant's calendar can only ever be
found under that tenant (the digest is of tenant and name together):

    job_id = "cal#" + sha256(tenant NUL name)       the calendar: `calendar_tenant`, `name`,
                                                    `entries` (JSON), `version`, the instants
    job_id = "calusers#" + sha256(tenant NUL name)  `users`: the tenant's live jobs (ACTIVE or
                                                    PAUSED) referencing it
    job_id = "cals#" + sha256(tenant)               `names`: the tenant's calendars (a string
                                                    set, bounded: the tenant's limit)

None carries `tenant`, `due_shard`, `next_run_at` or `expires_at`, so no index, listing or
TTL picks one up, and the job events' stream filter (job ids start `j_`) drops their
records. `users` is kept by the job writes themselves (`reference_updates`, in the same
transaction as the job, conditioned on the calendar existing): a job can only reference a
calendar that exists, and a calendar some live job references cannot be deleted (the delete
is conditioned on `users` being 0). The count is a small item of its own, so a job write
costs one write unit per calendar it starts or stops referencing, whatever the size of the
calendar; nothing on a run's path reads or writes any of them."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from botocore.exceptions import ClientError
from pydantic import TypeAdapter

from ..domain.calendars import Calendar, CalendarEntry
from ..domain.errors import ConcurrentUpdate, LimitExceeded, NotFound
from ..domain.instants import format_instant, parse_instant
from ..domain.models import TOLERANT
from .dynamo import batch_get, error_code, from_item, to_item, translated_errors

CALENDAR_PREFIX = "cal#"
USERS_PREFIX = "calusers#"
DIRECTORY_PREFIX = "cals#"
_ENTRIES = TypeAdapter(list[CalendarEntry])


def _digest(*parts: str) -> str:
    joined = "\x00".join(parts)
    return hashlib.sha256(joined.encode("utf-8", "surrogatepass")).hexdigest()


def calendar_key(tenant: str, name: str) -> str:
    return CALENDAR_PREFIX + _digest(tenant, name)


def users_key(tenant: str, name: str) -> str:
    return USERS_PREFIX + _digest(tenant, name)


def directory_key(tenant: str) -> str:
    return DIRECTORY_PREFIX + _digest(tenant)


class CalendarInUse(Exception):
    """The calendar's delete was refused: `users` live jobs reference it."""

    def __init__(self, users: int) -> None:
        super().__init__(f"{users} live jobs reference the calendar")
        self.users = users


@dataclass(frozen=True)
class Reference:
    """A job write starting (`delta` 1) or stopping (-1) to reference a calendar."""

    tenant: str
    name: str
    delta: int


def reference_update(table: str, reference: Reference) -> dict[str, Any]:
    """The transaction item a job write carries for `reference`: its calendar's `users`
    moved by `delta`, on the condition that the calendar exists (its users item does: it is
    written and deleted with the calendar). A refusal names the calendar missing."""
    return {
        "Update": {
            "TableName": table,
            "Key": to_item({"job_id": users_key(reference.tenant, reference.name)}),
            "UpdateExpression": "ADD #users :delta",
            "ConditionExpression": "attribute_exists(job_id)",
            "ExpressionAttributeNames": {"#users": "users"},
            "ExpressionAttributeValues": to_item({":delta": reference.delta}),
        }
    }


def reference_key_of(item: dict[str, Any]) -> str | None:
    """The users item a transaction item updates, when it is a `reference_update`'s."""
    update = item.get("Update") or {}
    key = from_item(update.get("Key") or {}).get("job_id")
    return key if isinstance(key, str) and key.startswith(USERS_PREFIX) else None


class CalendarStore:
    def __init__(self, client: Any, table_name: str) -> None:
        self._db = client
        self._table = table_name

    @property
    def table(self) -> str:
        return self._table

    # --- reads ---

    def _read(self, key: str) -> dict[str, Any] | None:
        """The item at `key` (strongly consistent), or None."""
        with translated_errors():
            response = self._db.get_item(
                TableName=self._table, Key=to_item({"job_id": key}), ConsistentRead=True
            )
        item = response.get("Item")
        return dict(item) if item else None

    def get(self, tenant: str, name: str) -> Calendar | None:
        """The tenant's calendar `name` (strongly consistent), or None."""
        item = self._read(calendar_key(tenant, name))
        return self._calendar_of(item) if item else None

    def users(self, tenant: str, name: str) -> int:
        """How many live jobs of the tenant reference the calendar (0 when it has none)."""
        return int(from_item(self._read(users_key(tenant, name)) or {}).get("users", 0))

    def names(self, tenant: str) -> list[str]:
        """The names of the tenant's calendars, sorted."""
        return sorted(from_item(self._read(directory_key(tenant)) or {}).get("names") or ())

    def list_for_tenant(self, tenant: str) -> list[Calendar]:
        """The tenant's calendars, by name: one read of its directory, one batch of the items."""
        keys = [to_item({"job_id": calendar_key(tenant, name)}) for name in self.names(tenant)]
        items = batch_get(self._db, self._table, keys) if keys else []
        return sorted((self._calendar_of(item) for item in items), key=lambda c: c.name)

    @staticmethod
    def _calendar_of(item: dict[str, Any]) -> Calendar:
        data = from_item(item)
        return Calendar(
            name=data["name"],
            entries=_ENTRIES.validate_json(data["entries"], context=TOLERANT),
            version=int(data["version"]),
            created_at=parse_instant(data["created_at"]),
            updated_at=parse_instant(data["updated_at"]),
        )

    # --- writes ---

    def _calendar_item(self, tenant: str, calendar: Calendar) -> dict[str, Any]:
        assert calendar.created_at is not None and calendar.updated_at is not None
        return to_item(
            {
                "job_id": calendar_key(tenant, calendar.name),
                "calendar_tenant": tenant,  # not `tenant`: kept out of the jobs' tenant index
                "name": calendar.name,
                "entries": _ENTRIES.dump_json(calendar.entries, exclude_none=True).decode(),
                "version": calendar.version,
                "created_at": format_instant(calendar.created_at),
                "updated_at": format_instant(calendar.updated_at),
            }
        )

    def create(self, tenant: str, calendar: Calendar, *, max_calendars: int) -> None:
        """Write a new calendar (version 1), its users item (0, unless one is there) and its
        name in the tenant's directory, in one transaction. Raises LimitExceeded when the tenant already has
        `max_calendars`, ConcurrentUpdate when the name was taken meanwhile."""
        name_set = {"SS": [calendar.name]}
        items = [
            {
                "Put": {
                    "TableName": self._table,
                    "Item": self._calendar_item(tenant, calendar),
                    "ConditionExpression": "attribute_not_exists(job_id)",
                }
            },
            {
                # Kept when it is there: a calendar lost by hand and written again keeps the
                # count of the live jobs that never stopped referencing it.
                "Update": {
                    "TableName": self._table,
                    "Key": to_item({"job_id": users_key(tenant, calendar.name)}),
                    "UpdateExpression": "SET #users = if_not_exists(#users, :none)",
                    "ExpressionAttributeNames": {"#users": "users"},
                    "ExpressionAttributeValues": to_item({":none": 0}),
                }
            },
            {
                "Update": {
                    "TableName": self._table,
                    "Key": to_item({"job_id": directory_key(tenant)}),
                    "UpdateExpression": "ADD #names :name",
                    "ConditionExpression": (
                        "attribute_not_exists(#names) OR size(#names) < :most OR contains(#names, :one)"
                    ),
                    "ExpressionAttributeNames": {"#names": "names"},
                    "ExpressionAttributeValues": {
                        ":name": name_set,
                        **to_item({":most": max_calendars, ":one": calendar.name}),
                    },
                }
            },
        ]
        reasons = self._transact(items)
        if reasons is None:
            return
        if _refused(reasons, 2):
            raise LimitExceeded(
                f"the tenant already has {max_calendars} calendars (the limit); delete one first",
                limit=max_calendars,
            )
        raise ConcurrentUpdate(f"calendar {calendar.name} is being written concurrently; retry")

    def replace(self, tenant: str, calendar: Calendar, *, read_version: int) -> None:
        """Replace the calendar read at `read_version` with `calendar`. Raises ConcurrentUpdate
        when it changed or was deleted meanwhile."""
        with translated_errors():
            try:
                self._db.put_item(
                    TableName=self._table,
                    Item=self._calendar_item(tenant, calendar),
                    ConditionExpression="version = :read",
                    ExpressionAttributeValues=to_item({":read": read_version}),
                )
            except ClientError as exc:
                if error_code(exc) == "ConditionalCheckFailedException":
                    raise ConcurrentUpdate(f"calendar {calendar.name} changed concurrently; retry") from exc
                raise

    def delete(self, tenant: str, name: str) -> None:
        """Delete the calendar, its users item and its name in the directory, in one
        transaction, on the condition that no live job references it. Raises NotFound,
        CalendarInUse (with the count), ConcurrentUpdate."""
        items = [
            {
                "Delete": {
                    "TableName": self._table,
                    "Key": to_item({"job_id": calendar_key(tenant, name)}),
                    "ConditionExpression": "attribute_exists(job_id)",
                }
            },
            {
                "Delete": {
                    "TableName": self._table,
                    "Key": to_item({"job_id": users_key(tenant, name)}),
                    "ConditionExpression": "attribute_not_exists(#users) OR #users <= :none",
                    "ExpressionAttributeNames": {"#users": "users"},
                    "ExpressionAttributeValues": to_item({":none": 0}),
                    "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
                }
            },
            {
                "Update": {
                    "TableName": self._table,
                    "Key": to_item({"job_id": directory_key(tenant)}),
                    "UpdateExpression": "DELETE #names :name",
                    "ExpressionAttributeNames": {"#names": "names"},
                    "ExpressionAttributeValues": {":name": {"SS": [name]}},
                }
            },
        ]
        reasons = self._transact(items)
        if reasons is None:
            return
        if _refused(reasons, 0):
            raise NotFound(f"calendar {name} not found")
        if _refused(reasons, 1):
            held = from_item(reasons[1].get("Item") or {}).get("users")
            raise CalendarInUse(int(held) if held is not None else self.users(tenant, name))
        raise ConcurrentUpdate(f"calendar {name} is changing concurrently; retry")

    def _transact(self, items: list[dict[str, Any]]) -> list[dict[str, Any]] | None:
        """Write `items` in one transaction: None once written, else the reasons it was
        cancelled for (one per item). Raises StorageUnavailable, or what else it meets."""
        with translated_errors():
            try:
                self._db.transact_write_items(TransactItems=items)
            except ClientError as exc:
                if error_code(exc) != "TransactionCanceledException":
                    raise
                return [dict(r) for r in exc.response.get("CancellationReasons") or []]
        return None


def _refused(reasons: list[dict[str, Any]], position: int) -> bool:
    return position < len(reasons) and reasons[position].get("Code") == "ConditionalCheckFailed"


def stamped(calendar: Calendar, now: datetime, previous: Calendar | None) -> Calendar:
    """`calendar` as written at `now` over `previous` (None: a new one): its version and instants."""
    if previous is None:
        return calendar.model_copy(update={"version": 1, "created_at": now, "updated_at": now})
    return calendar.model_copy(
        update={"version": previous.version + 1, "created_at": previous.created_at, "updated_at": now}
    )
