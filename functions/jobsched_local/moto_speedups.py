"""Work moto repeats on every request that local mode's moto server can skip, answers unchanged.

Local mode's moto server serves one call at a time, so a burst of runs drains at moto's speed
(bench/report.md, start lag). Profiling it during a burst of 200 runs showed three costs that
grow with the table, the queue or the module list rather than with the request:

- every request lists moto's package directory twice (a `stat` per service) to learn that the
  Host header names no service: the list is read once instead;
- every message a ReceiveMessage returns reads the queue's retention period through
  GetQueueAttributes, which counts the queue's visible, delayed and in-flight messages (three
  walks of the whole queue): the period is read from the queue instead;
- every Query lists and sorts every item of the table, then keeps those of the asked-for key;
  a KEYS_ONLY or INCLUDE index then converts each whole matching item to plain Python to keep
  a few attributes. The query is now handed only the items that can match (the index's
  partition key attributes present, or the table partition asked for), unsorted: the query
  sorts what it keeps on the full primary key, a total order, so the order it was handed
  never shows. Projection converts only the attributes it keeps;
- every DynamoDB and DynamoDB Streams answer is written out by moto's generic serializer, which
  looks each of the ten members of every attribute value up under up to four names, through
  six alias providers, and that was most of the time a GetRecords, Query or GetItem took: an
  attribute value ({"S": "x"}, one type key, as moto holds it) is now written from its one key;
- every request lists every attribute of its handler class (inspect.getmembers) to learn
  whether the action names one of its methods: each class's listing is made once and kept.

Each patch keeps moto's own code for everything it decides; tests/integration/
test_moto_speedups.py compares answers with and without them."""

from __future__ import annotations

import functools
import inspect
import re
import threading
from typing import Any

_installed = False
_lock = threading.Lock()
_query = threading.local()  # the table and index a Query of this thread is running on
_LIST_ELEMENT = re.compile(r"(.+)\[(\d+)\]$")  # how moto's projection reads "name[3]"


def install() -> None:
    """Install every patch in this process (idempotent)."""
    global _installed
    with _lock:
        if _installed:
            return
        _read_module_list_once()
        _retention_from_the_queue()
        _query_only_candidates()
        _project_only_kept_attributes()
        _attribute_values_from_their_one_key()
        _list_each_handlers_methods_once()
        _installed = True


def _read_module_list_once() -> None:
    import moto.backends as backends

    modules = tuple(backends.list_of_moto_modules())  # moto's package directory does not change
    backends.list_of_moto_modules = lambda: iter(modules)


def _retention_from_the_queue() -> None:
    import moto.sqs.models as sqs_models

    def is_message_valid_based_on_retention_period(self: Any, queue_name: str, message: Any) -> bool:
        # What GetQueueAttributes(["MessageRetentionPeriod"]) answers, without computing the rest;
        # the time read through the module, as moto's own does (the chaos harness replaces it).
        retention_period = self.get_queue(queue_name).message_retention_period
        return bool(retention_period + message.sent_timestamp / 1000 > sqs_models.unix_time())

    backend: Any = sqs_models.SQSBackend
    backend.is_message_valid_based_on_retention_period = is_message_valid_based_on_retention_period


def _query_only_candidates() -> None:
    from moto.dynamodb.models.table import Table

    original_query = Table.query
    original_all_items = Table.all_items
    signature = inspect.signature(original_query)

    def query(self: Any, *args: Any, **kwargs: Any) -> Any:
        # moto passes the index name by position, the key conditions by name.
        bound = signature.bind(self, *args, **kwargs).arguments
        previous = getattr(_query, "running", None)
        _query.running = (self, bound.get("hash_key"), bound.get("index_name"))
        try:
            return original_query(self, *args, **kwargs)
        finally:
            _query.running = previous

    def all_items(self: Any) -> list[Any]:
        running = getattr(_query, "running", None)
        if running is None or running[0] is not self:
            return original_all_items(self)  # a scan, an export, ...: in key order, as before
        _query.running = None  # only the query's own listing is narrowed
        _, hash_key, index_name = running
        if index_name:
            index = self.get_index(index_name) if index_name in {i.name for i in self.all_indexes()} else None
            if index is None:
                return original_all_items(self)  # moto refuses the query with its own message
            # An item without every partition key attribute of the index is not in it.
            needed = [key["AttributeName"] for key in index.schema if key["KeyType"] == "HASH"]
            return [item for item in _every_item(self) if all(name in item.attrs for name in needed)]
        # A table query keeps the items of one partition.
        return [item for item in _every_item(self) if item.hash_key == hash_key]

    Table.query = query  # type: ignore[method-assign]
    Table.all_items = all_items  # type: ignore[method-assign]


def _every_item(table: Any) -> list[Any]:
    if not table.range_key_attr:
        return list(table.items.values())
    return [item for partition in table.items.values() for item in partition.values()]


def _project_only_kept_attributes() -> None:
    import copy

    from moto.dynamodb.models.table import SecondaryIndex

    original_project = SecondaryIndex.project

    def project(self: Any, item: Any) -> Any:
        projection_type = (self.projection or {}).get("ProjectionType")
        if projection_type not in ("KEYS_ONLY", "INCLUDE"):
            return original_project(self, item)
        kept = set(self.table_key_attrs) | {key["AttributeName"] for key in self.schema}
        if projection_type == "INCLUDE":
            kept.update(self.projection.get("NonKeyAttributes", []))
        # moto reads a name "a[1]" as element 1 of list "a": keep "a" too for it to find.
        kept |= {m.group(1) for m in map(_LIST_ELEMENT.match, list(kept)) if m}
        narrowed = copy.copy(item)
        narrowed.attrs = {name: value for name, value in item.attrs.items() if name in kept}
        return original_project(self, narrowed)  # moto's own projection of what it keeps

    SecondaryIndex.project = project  # type: ignore[method-assign]


# The members of DynamoDB's (and DynamoDB Streams') AttributeValue, one of which a value holds.
_ATTRIBUTE_VALUE_MEMBERS = frozenset(("S", "N", "B", "SS", "NS", "BS", "M", "L", "NULL", "BOOL"))


def _attribute_values_from_their_one_key() -> None:
    from moto.core.serialize import DEFAULT_ALIAS_PROVIDERS, BaseJSONSerializer, XFormedAttributePicker

    original_structure = BaseJSONSerializer._serialize_type_structure

    @functools.wraps(original_structure)  # __wrapped__: moto's own, which the tests compare with
    def serialize_type_structure(self: Any, serialized: Any, value: Any, shape: Any, key: str) -> None:
        picker = self._value_picker
        if (
            key  # an empty key writes the members into the enclosing map: moto's own way
            and type(value) is dict
            and len(value) == 1
            and shape.name == "AttributeValue"
            and type(picker) is XFormedAttributePicker
            and picker.alias_providers is DEFAULT_ALIAS_PROVIDERS
            and not picker.response_transformers
        ):
            members = shape.members
            (member_key,) = value
            if member_key in _ATTRIBUTE_VALUE_MEMBERS and members.keys() == _ATTRIBUTE_VALUE_MEMBERS:
                # moto looks each member up in the dict under its name, its snake_case name and,
                # for the set and list members, its shape's name in both cases; none of those is
                # another member's name, so only the dict's one key finds a value. It is then
                # written by moto's own code for that member's type.
                for member_shape in members.values():
                    member_shape.parent = shape
                wrapper: dict[str, Any] = {}
                member_value = value[member_key]
                if member_value is not None:
                    self._serialize(wrapper, member_value, members[member_key], member_key)
                self._default_serialize(serialized, wrapper, shape, key)
                return
        original_structure(self, serialized, value, shape, key)

    BaseJSONSerializer._serialize_type_structure = serialize_type_structure  # type: ignore[method-assign]


def _list_each_handlers_methods_once() -> None:
    import moto.core.responses as responses

    # moto's call_action only asks whether the action is among the names (`action in ...`); a
    # handler class's methods do not change once the server runs, so moto's own listing of
    # them is made once per class and kept.
    listing = responses.method_names_from_class

    @functools.cache
    def method_names_from_class(clazz: Any) -> frozenset[str]:
        return frozenset(listing(clazz))

    responses.method_names_from_class = method_names_from_class  # type: ignore[assignment]
