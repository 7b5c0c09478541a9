"""Work moto repeats on every request that local mode's moto server can skip, answers unchanged.

Local mode's moto server serves one call at a time, so a burst of runs drains at moto's speed
(bench/report.md, start lag). Profiling it during a burst of 200 runs showed three costs that
grow with the table, the queue or the module list rather than with the request:

- every request lists moto's package directory twice (a `stat` per service) to learn that the
  Host header names no service: the list is read once instead;
- every message a ReceiveMessage returns reads the queue's retention period through
  GetQueueAttributes, which counts the queue's visible, delayed and in-flight messages (three
  walks of the whole queue): the period is read from the queue instead;
- every SendMessage (and each entry of a SendMessageBatch) reads the queue's
  ContentBasedDeduplication setting from the queue's attribute listing, which counts its
  visible, delayed and in-flight messages (three walks of the whole queue, every message's
  clock read twice or more); a FIFO queue's send reads it four times. A send grew with the
  delayed messages waiting in the queue (a burst's runs, queued ahead with a delay). While a
  message is checked and added, that queue's listing now leaves the counts out: nothing in a
  send reads them, and every other reader (GetQueueAttributes, a receive) counts as before;
- every ReceiveMessage (the glue polls each queue a few times a second, most often finding
  nothing) walks the whole queue for its visible, undelayed messages, reading the clock twice
  for every message: 86 ms of CPU for an empty receive from a queue of 10,000 delayed
  messages. The clock is now read once per walk, and each message's times compared with it;
- every DeleteMessage (each run's message, once its batch is done) looks for the message by
  asking every message of the queue for the list of its receipt handles, twice: 3.7 ms of CPU
  for a queue holding 10,000 delayed messages. A message is now found from the receipt
  handle a receive gave it, and taken out of the queue by identity;
- every Query lists and sorts every item of the table, then keeps those of the asked-for key;
  a KEYS_ONLY or INCLUDE index then converts each whole matching item to plain Python to keep
  a few attributes. The query is now handed only the items that can match (the index's
  partition key attributes present, or the table partition asked for, looked up under its
  key rather than compared with every item's: each look at a tenant's slots, many a second
  in a burst held at the tenant's limit, walked the whole Runs table), unsorted: the query
  sorts what it keeps on the full primary key, a total order, so the order it was handed
  never shows. Projection converts only the attributes it keeps;
- every DynamoDB and DynamoDB Streams answer is written out by moto's generic serializer, which
  looks each of the ten members of every attribute value up under up to four names, through
  six alias providers, and that was most of the time a GetRecords, Query or GetItem took: an
  attribute value ({"S": "x"}, one type key, as moto holds it) is now written from its one key;
- every request lists every attribute of its handler class (inspect.getmembers) to learn
  whether the action names one of its methods: each class's listing is made once and kept;
- every PutEvents entry is written to each matching rule's targets through their input paths
  (a target's InputTransformer, or ten default paths), each parsed by jsonpath-ng, which
  builds its parser from the grammar at every parse: 13% of moto's CPU in a burst of 1,000
  runs. A path is now parsed once and its expression kept.

Each patch keeps moto's own code for everything it decides; tests/integration/
test_moto_speedups.py compares answers with and without them."""

from __future__ import annotations

import contextlib
import functools
import inspect
import re
import threading
from collections.abc import Iterator
from typing import Any

_installed = False
_lock = threading.Lock()
_query = threading.local()  # the table and index a Query of this thread is running on
_sending = threading.local()  # the queue a send of this thread is checking or adding a message to
_LIST_ELEMENT = re.compile(r"(.+)\[(\d+)\]$")  # how moto's projection reads "name[3]"


def install() -> None:
    """Install every patch in this process (idempotent)."""
    global _installed
    with _lock:
        if _installed:
            return
        _read_module_list_once()
        _retention_from_the_queue()
        _send_without_counting()
        _walk_the_queue_with_one_clock_read()
        _delete_by_receipt_handle()
        _query_only_candidates()
        _project_only_kept_attributes()
        _attribute_values_from_their_one_key()
        _list_each_handlers_methods_once()
        _parse_each_input_path_once()
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


# What moto's attribute listing of a queue counts by walking its messages.
_MESSAGE_COUNTS = (
    "approximate_number_of_messages",
    "approximate_number_of_messages_delayed",
    "approximate_number_of_messages_not_visible",
)


def _send_without_counting() -> None:
    import moto.sqs.models as sqs_models

    queue_class: Any = sqs_models.Queue
    backend: Any = sqs_models.SQSBackend

    def uncounted(counted: property) -> property:
        @functools.wraps(counted.fget)  # type: ignore[arg-type]
        def count(self: Any) -> int | None:
            if getattr(_sending, "queue", None) is self:
                # Asked for by moto's attribute listing while it checks or adds a message to
                # this queue, which reads the listing's settings only (ContentBasedDeduplication).
                return None
            return counted.fget(self)  # type: ignore[misc]

        return property(count)

    for name in _MESSAGE_COUNTS:
        setattr(queue_class, name, uncounted(getattr(queue_class, name)))

    @contextlib.contextmanager
    def sending_to(queue: Any) -> Iterator[None]:
        previous = getattr(_sending, "queue", None)
        # A queue with a Lambda event source mapping receives, invokes and deletes inside
        # add_message (moto's own poller): everything read there is counted, as before.
        _sending.queue = None if queue.lambda_event_source_mappings else queue
        try:
            yield
        finally:
            _sending.queue = previous

    original_send = backend.send_message
    original_validate = backend._validate_message
    original_add = queue_class.add_message

    @functools.wraps(original_send)
    def send_message(self: Any, queue_name: str, *args: Any, **kwargs: Any) -> Any:
        with sending_to(self.get_queue(queue_name)):  # moto's own first step: an unknown queue raises
            return original_send(self, queue_name, *args, **kwargs)

    @functools.wraps(original_validate)
    def validate_message(self: Any, queue: Any, *args: Any, **kwargs: Any) -> Any:
        with sending_to(queue):  # also each entry of a batch, before any is sent
            return original_validate(self, queue, *args, **kwargs)

    @functools.wraps(original_add)
    def add_message(self: Any, *args: Any, **kwargs: Any) -> Any:
        with sending_to(self):  # also a message a receive moves to its dead-letter queue
            return original_add(self, *args, **kwargs)

    backend.send_message = send_message
    backend._validate_message = validate_message
    queue_class.add_message = add_message


def _walk_the_queue_with_one_clock_read() -> None:
    import moto.sqs.models as sqs_models

    queue_class: Any = sqs_models.Queue
    walked = queue_class.messages

    @functools.wraps(walked.fget)
    def messages(self: Any) -> list[Any]:
        # moto's Message.visible (now > visible_at) and not Message.delayed (now < delayed_until),
        # with one reading of the clock, through the module as moto's own (a simulated clock
        # replaces it there).
        now = sqs_models.unix_time_millis()
        return [m for m in self._messages if now > m.visible_at and not now < m.delayed_until]

    queue_class.messages = property(messages)


def _delete_by_receipt_handle() -> None:
    import weakref

    import moto.sqs.models as sqs_models

    message_class: Any = sqs_models.Message
    queue_class: Any = sqs_models.Queue
    # Receipt handle -> the message a receive gave it (moto's handles are random, one a receive).
    given: weakref.WeakValueDictionary[str, Any] = weakref.WeakValueDictionary()
    original_mark = message_class.mark_received
    original_delete = queue_class.delete_message

    @functools.wraps(original_mark)
    def mark_received(self: Any, *args: Any, **kwargs: Any) -> None:
        original_mark(self, *args, **kwargs)
        given[self.receipt_handle] = self

    @functools.wraps(original_delete)
    def delete_message(self: Any, receipt_handle: str) -> None:
        message = given.get(receipt_handle)
        if message is None or receipt_handle in self.deleted_messages:
            return original_delete(self, receipt_handle)  # already deleted, or never given here
        kept = [m for m in self._messages if m is not message]
        if len(kept) == len(self._messages):
            return original_delete(self, receipt_handle)  # not in this queue: moto's own answer
        # A new list, as moto's own: a receive walking the old one on another thread is unharmed.
        self._messages = kept
        # What moto's own does with the one message that had the handle.
        self.pending_messages.discard(message)
        self.deleted_messages.update(message.all_receipt_handles)
        return None

    message_class.mark_received = mark_received
    queue_class.delete_message = delete_message


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
        # A table query keeps the items of one partition: moto keeps them under its key (a
        # DynamoType hashes and compares by its type and cast value, as the query's does).
        if hash_key is None:
            return []
        partition = self.items.get(hash_key)  # .get: moto's defaultdict gains no empty partition
        if partition is None:
            return []
        return list(partition.values()) if self.range_key_attr else [partition]

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


def _parse_each_input_path_once() -> None:
    try:
        import jsonpath_ng.ext
    except ImportError:  # moto's EventBridge is not installed: nothing parses input paths
        return

    # moto's EventBridge reads every target's input paths (a rule's InputTransformer, or its
    # ten default paths when it has none) with `from jsonpath_ng.ext import parse` at each
    # event, and each parse builds a new parser from the grammar. A parsed path is an immutable
    # expression (find reads the event, never changes the path), so each path is parsed once.
    original = jsonpath_ng.ext.parse
    if getattr(original, "cache_info", None) is None:
        jsonpath_ng.ext.parse = functools.lru_cache(maxsize=256)(original)
