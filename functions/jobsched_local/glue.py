"""The AWS glue local mode plays, and nothing else: API Gateway's HTTP front, EventBridge
ticks, the DynamoDB stream and SQS event source mappings, and TTL expiry. Each hands the
real handler exactly the event Lambda would."""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import socket
import threading
import time
from collections.abc import Callable
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

from jobsched.domain.errors import JobschedError
from jobsched.edge import MAX_BODY_BYTES, payload_too_large_body
from jobsched_console import console_response

from .apigw import rest_event
from .background import BackgroundServer
from .lambda_context import InvocationContext
from .loopback import api_refusal

log = logging.getLogger("jobsched_local")
Handler = Callable[[dict[str, Any], Any], Any]


class Invoker:
    """Calls a handler like Lambda: a fresh context per invocation. One invocation at a time
    per function unless `concurrent` (module-level batch processors and resolvers hold
    per-invocation state; the worker's handler keeps its own per invocation, so its event
    sources may invoke it side by side, as Lambda would in separate environments)."""

    def __init__(
        self,
        name: str,
        handler: Handler,
        timeout_seconds: float = 60.0,
        *,
        concurrent: bool = False,
        stopping: threading.Event | None = None,
    ) -> None:
        self.name = name
        self._handler = handler
        self._timeout = timeout_seconds
        # Set when local mode is shutting down: a failure then (its servers going away) is
        # logged at debug, without a traceback.
        self._stopping = stopping
        self._serial = None if concurrent else threading.Lock()
        self._count = threading.Lock()
        self.invocations = 0
        self.errors = 0

    def __call__(self, event: dict[str, Any]) -> Any:
        with self._serial or contextlib.nullcontext():
            with self._count:
                self.invocations += 1
            context = InvocationContext(function_name=f"jobsched-{self.name}", timeout_seconds=self._timeout)
            try:
                return self._handler(event, context)
            except Exception:
                with self._count:
                    self.errors += 1
                if self._stopping is not None and self._stopping.is_set():
                    log.debug("%s invocation failed while stopping", self.name, exc_info=True)
                else:
                    log.exception("%s invocation failed", self.name)
                raise


class Loop:
    """A daemon thread calling `step` every `interval` seconds until stopped.

    `stop()` is `request_stop()` then `join(10)`; to stop many loops, request every stop
    first, then join them (a step still running keeps its loop until it returns). A step
    failing after the stop was requested is logged at debug, without a traceback: what it
    calls is being shut down."""

    def __init__(self, name: str, interval: float, step: Callable[[], Any]) -> None:
        self.name = name
        self.interval = interval
        self._step = step
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self.request_stop()
        self.join(10)

    def request_stop(self) -> None:
        """No step starts after this; a step running goes on until it returns."""
        self._stop.set()

    @property
    def stop_requested(self) -> bool:
        return self._stop.is_set()

    def join(self, timeout: float) -> None:
        """Waits up to `timeout` seconds for the running step (if any) to return."""
        if self._thread.is_alive():
            self._thread.join(timeout=max(0.0, timeout))

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self._step()
            except Exception:
                if self._stop.is_set():
                    log.debug("%s failed while stopping", self.name, exc_info=True)
                else:
                    log.exception("%s failed; retrying next interval", self.name)
            self._stop.wait(self.interval)


# --- API Gateway ---


class HttpFront(BackgroundServer):
    """HTTP → API Gateway REST proxy event → `api` handler → HTTP response.

    Local auth: the `x-api-key` header maps to a tenant, which reaches the handler where an
    authorizer would put it (`requestContext.authorizer.tenantId`). Requests from other sites
    or addressed to another host name are refused first (loopback.api_refusal). `local`
    answers local mode's own paths (method, path, query, tenant) -> (status, JSON) or None,
    or raises a JobschedError answered as the API answers one, after the same checks and
    the same key, before the API.

    Every method reaches `handle`, whatever its name: the console answers its own paths, the
    `api` function the rest (a 405 with `Allow` for a method its route lacks, OPTIONS, HEAD
    and TRACE included), never http.server's HTML 501. An answer to HEAD has no body."""

    def __init__(
        self,
        host: str,
        port: int,
        invoke: Invoker,
        tenant_for: Callable[[str | None], str | None],
        local: Callable[[str, str, str, str], tuple[int, Any] | None] | None = None,
    ):
        front = self

        class RequestHandler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def __getattr__(self, name: str) -> Any:
                # http.server calls do_<METHOD> and answers an HTML 501 when there is none.
                if name.startswith("do_"):
                    return functools.partial(front.handle, self)
                raise AttributeError(name)

            def log_message(self, format: str, *args: Any) -> None:
                log.debug("api %s", format % args)

        self._invoke = invoke
        self._tenant_for = tenant_for
        self._local = local
        server = ThreadingHTTPServer((host, port), RequestHandler)
        server.daemon_threads = True
        super().__init__(server, "api-front")

    def handle(self, request: BaseHTTPRequestHandler) -> None:
        headers = {k.lower(): v for k, v in request.headers.items()}
        foreign = api_refusal(headers, int(self._server.server_address[1]))
        if foreign is not None:
            # Before the body is read and before any route, the console's files included.
            request.close_connection = True
            status, code, message = foreign
            self._reply(request, status, {"code": code, "message": message}, {"Connection": "close"})
            return
        length, refusal = body_length(request.headers.get_all("Content-Length"))
        if refusal is not None:
            # The body is never read: answer, then drop the connection it is still on.
            request.close_connection = True
            status, rule = refusal
            if status == 413:  # the stack's web ACL answer, word for word
                self._send(
                    request,
                    413,
                    payload_too_large_body(MAX_BODY_BYTES).encode(),
                    {"Content-Type": "application/json", "Connection": "close"},
                )
                linger(request)
                return
            error = {
                "code": "invalid_request",
                "message": f"Content-Length: {rule}",
                "errors": [{"field": "Content-Length", "rule": rule}],
            }
            self._reply(request, status, error, {"Connection": "close"})
            return
        body = request.rfile.read(length) if length else None
        parts = urlsplit(request.path)
        static = console_response(request.command, parts.path)
        if static is not None:
            # The console's files need no key: the page asks for one and sends it itself.
            self._send(request, static.status, static.body, static.headers)
            return
        tenant = self._tenant_for(headers.get("x-api-key"))
        # Every path needs the key, /docs and /openapi.json too: as every method of a deployed
        # stack needs a SigV4 signature.
        if tenant is None:
            self._reply(
                request, 401, {"code": "unauthenticated", "message": "x-api-key: missing or unknown"}, {}
            )
            return
        try:
            answered = self._local(request.command, parts.path, parts.query, tenant) if self._local else None
        except JobschedError as exc:
            self._reply(request, exc.status, exc.to_dict(), {**exc.headers, "Cache-Control": "no-store"})
            return
        if answered is not None:
            self._reply(request, answered[0], answered[1], {"Cache-Control": "no-store"})
            return
        event = rest_event(
            request.command,
            parts.path,
            body=body,
            headers=headers,
            query=parts.query,
            tenant=tenant,
            source_ip=request.client_address[0],
            stage_in_path=False,  # served at the root, as API Gateway behind a custom domain
        )
        try:
            result = self._invoke(event)
        except Exception:
            # What API Gateway answers when the integration fails.
            self._reply(request, 502, {"message": "Internal server error"}, {})
            return
        reply_headers = dict(result.get("headers") or {})
        for name, values in (result.get("multiValueHeaders") or {}).items():
            reply_headers[name] = ", ".join(values)
        raw = result.get("body") or ""
        if result.get("isBase64Encoded"):
            import base64

            payload = base64.b64decode(raw)
        else:
            payload = raw.encode()
        self._send(request, int(result.get("statusCode", 200)), payload, reply_headers)

    def _reply(
        self, request: BaseHTTPRequestHandler, status: int, body: Any, headers: dict[str, str]
    ) -> None:
        self._send(
            request, status, json.dumps(body).encode(), {"Content-Type": "application/json", **headers}
        )

    @staticmethod
    def _send(request: BaseHTTPRequestHandler, status: int, payload: bytes, headers: dict[str, str]) -> None:
        request.send_response(status)
        for name, value in headers.items():
            if name.lower() != "content-length" and (name.lower() != "connection" or value == "close"):
                request.send_header(name, value)
        request.send_header("Content-Length", str(len(payload)))
        request.end_headers()
        if request.command != "HEAD":
            request.wfile.write(payload)


LINGER_BYTES = 4 * MAX_BODY_BYTES  # of a refused body, read and dropped before the close
LINGER_SECONDS = 2.0


def linger(request: BaseHTTPRequestHandler) -> None:
    """After answering a body it refuses unread: read and drop what the client is still
    sending (at most LINGER_BYTES, for LINGER_SECONDS), then let the connection close. A
    client that sends its whole body before reading the answer (most do) then reads the
    413 instead of a broken pipe, as from a web server's lingering close."""
    connection = request.connection
    deadline = time.monotonic() + LINGER_SECONDS
    dropped = 0
    try:
        request.wfile.flush()
        connection.shutdown(socket.SHUT_WR)  # the answer is complete: the client sees its end
        while dropped < LINGER_BYTES and (left := deadline - time.monotonic()) > 0:
            connection.settimeout(left)
            chunk = connection.recv(65536)
            if not chunk:
                return
            dropped += len(chunk)
    except OSError:
        return


def body_length(values: list[str] | None) -> tuple[int, tuple[int, str] | None]:
    """The declared body length, or the status and rule the deployed edge answers instead: a
    400 for a length that is no non-negative number (or two that disagree), a 413 past the
    stack's default `apiMaxBodyBytes` (jobsched.edge; its web ACL answers the same 413)."""
    if not values:
        return 0, None
    if len(set(values)) > 1:
        return 0, (400, "sent more than once with different values")
    text = values[0].strip()
    if not text.isdigit() or not text.isascii():
        return 0, (400, "must be a non-negative whole number of bytes")
    # Leading zeros count for nothing, as in the web ACL's pattern (infra.api.integers_above).
    digits = text.lstrip("0") or "0"
    if len(digits) > 10 or int(digits) > MAX_BODY_BYTES:
        return 0, (413, f"the body may have at most {MAX_BODY_BYTES} bytes")
    return int(digits), None


# --- DynamoDB stream → Lambda ---


def lambda_stream_record(record: dict[str, Any], stream_arn: str, region: str) -> dict[str, Any]:
    """moto's stream record in the shape Lambda delivers (the one place this is converted)."""
    dynamodb = dict(record.get("dynamodb") or {})
    created = dynamodb.get("ApproximateCreationDateTime")
    if isinstance(created, datetime):
        dynamodb["ApproximateCreationDateTime"] = int(created.timestamp())
    elif created is None:
        dynamodb["ApproximateCreationDateTime"] = int(time.time())
    return {
        "eventID": record.get("eventID"),
        "eventName": record.get("eventName"),
        "eventVersion": "1.1",
        "eventSource": "aws:dynamodb",
        "awsRegion": region,
        "dynamodb": dynamodb,
        "eventSourceARN": stream_arn,
    }


def read_stream(streams: Any, arn: str, iterators: dict[str, str]) -> list[dict[str, Any]]:
    """The records each shard of a stream has added since the last read (`iterators` keeps
    each shard's position between calls), as the Lambda poller sees them."""
    records: list[dict[str, Any]] = []
    for shard in streams.describe_stream(StreamArn=arn)["StreamDescription"]["Shards"]:
        shard_id = shard["ShardId"]
        iterator = iterators.get(shard_id)
        if iterator is None:
            iterator = streams.get_shard_iterator(
                StreamArn=arn, ShardId=shard_id, ShardIteratorType="TRIM_HORIZON"
            )["ShardIterator"]
        response = streams.get_records(ShardIterator=iterator, Limit=1000)
        iterators[shard_id] = response.get("NextShardIterator") or iterator
        records += response.get("Records", [])
    return records


class StreamSource:
    """Event source mapping for a DynamoDB stream: batches, filter criteria, partial batch
    failures (retry from the first failed record), checkpoints per (stream, shard)."""

    def __init__(
        self,
        streams_client: Any,
        stream_arn: str,
        invoke: Invoker,
        *,
        region: str,
        matches: Callable[[dict[str, Any]], bool],
        batch_size: int = 100,
        max_retries: int = 10,
    ) -> None:
        self._streams = streams_client
        self._arn = stream_arn
        self._invoke = invoke
        self._region = region
        self._matches = matches
        self._batch_size = batch_size
        self._max_retries = max_retries
        self._iterators: dict[str, str] = {}
        self._pending: list[dict[str, Any]] = []
        self._failures = 0
        self.delivered = 0
        self.filtered = 0

    def poll(self) -> int:
        """One round: read new records, deliver what matches, honour partial failures."""
        if not self._pending:
            self._read()
        if not self._pending:
            return 0
        batch = self._pending[: self._batch_size]
        response = self._invoke({"Records": batch})
        failures = (response or {}).get("batchItemFailures") or []
        if failures:
            failed = {f["itemIdentifier"] for f in failures}
            first = next(i for i, r in enumerate(batch) if r["dynamodb"].get("SequenceNumber") in failed)
            self._failures += 1
            if self._failures <= self._max_retries:
                del self._pending[:first]  # checkpoint before the first failure, retry from it
                self.delivered += first
                return first
            log.error("stream batch kept failing; skipping it as the on-failure destination would")
        self._failures = 0
        del self._pending[: len(batch)]
        self.delivered += len(batch)
        return len(batch)

    def _read(self) -> None:
        for record in read_stream(self._streams, self._arn, self._iterators):
            converted = lambda_stream_record(record, self._arn, self._region)
            if self._matches(converted):
                self._pending.append(converted)
            else:
                self.filtered += 1


# --- SQS → Lambda ---


class QueueSource:
    """Event source mapping for an SQS queue: batches of up to 10, the queue's visibility
    timeout, ReportBatchItemFailures (only reported records stay), redrive by SQS itself, and
    up to `max_concurrency` invocations at once (the mapping's MaximumConcurrency): while
    invocations run, the next poll receives and invokes further batches, so one slow target
    holds one invocation, not the queue. With 1, `poll` invokes inline and returns once the
    batch is settled."""

    def __init__(
        self,
        sqs_client: Any,
        queue_url: str,
        queue_arn: str,
        invoke: Invoker,
        *,
        region: str,
        batch_size: int = 10,
        max_concurrency: int = 1,
        spawn: Callable[[Callable[[], None]], None] | None = None,
        idle_seconds: float = 0.0,
        clock: Callable[[], float] = time.monotonic,
    ):
        self._sqs = sqs_client
        self._url = queue_url
        self._arn = queue_arn
        self._invoke = invoke
        self._region = region
        self._batch_size = batch_size
        self._concurrency = max(1, max_concurrency)
        self._slots = threading.BoundedSemaphore(self._concurrency)
        self._spawn = spawn or _daemon_thread
        self._lock = threading.Lock()
        # After an empty receive, skip receives for this long: Lambda long-polls an empty
        # queue, but a long poll would hold the single-threaded moto server, and every
        # receive walks the whole queue (delayed messages too), taking moto from the calls
        # the runs already received are waiting on.
        self._idle_seconds = idle_seconds
        self._clock = clock
        self._quiet_until = 0.0
        self.delivered = 0
        self.in_flight = 0
        self.most_in_flight = 0  # the highest number of invocations seen running at once

    def poll(self) -> int:
        """Receive and invoke batches while a slot is free; the number of messages received.

        A receive that fails frees its slot (and raises, for the loop to log); a batch whose
        invocation cannot be started frees its slot and is made visible again at once,
        rather than after the queue's visibility timeout."""
        received = 0
        if self._clock() < self._quiet_until:
            return 0
        while self._slots.acquire(blocking=False):
            try:
                messages = self._receive()
            except BaseException:
                self._slots.release()
                raise
            if not messages:
                self._slots.release()
                self._quiet_until = self._clock() + self._idle_seconds
                break
            received += len(messages)
            with self._lock:
                self.in_flight += 1
                self.most_in_flight = max(self.most_in_flight, self.in_flight)
            if self._concurrency == 1:
                self._settle(messages)
                break
            try:
                self._spawn(functools.partial(self._settle, messages))
            except BaseException:
                with self._lock:
                    self.in_flight -= 1
                self._slots.release()
                self._release(messages)
                raise
        return received

    def _release(self, messages: list[dict[str, Any]]) -> None:
        """Make received messages visible again now (best effort: else their timeout does)."""
        with contextlib.suppress(Exception):
            self._sqs.change_message_visibility_batch(
                QueueUrl=self._url,
                Entries=[
                    {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"], "VisibilityTimeout": 0}
                    for i, m in enumerate(messages)
                ],
            )

    def _receive(self) -> list[dict[str, Any]]:
        messages: list[dict[str, Any]] = self._sqs.receive_message(
            QueueUrl=self._url,
            MaxNumberOfMessages=self._batch_size,
            WaitTimeSeconds=0,  # the moto server is single-threaded: never hold it
            MessageSystemAttributeNames=["All"],
            MessageAttributeNames=["All"],
        ).get("Messages", [])
        return messages

    def _settle(self, messages: list[dict[str, Any]]) -> None:
        """One invocation: delete what it did not report as failed; frees its slot."""
        try:
            records = [self._record(m) for m in messages]
            try:
                response = self._invoke({"Records": records})
                failed = {f["itemIdentifier"] for f in (response or {}).get("batchItemFailures") or []}
            except Exception:
                return  # the whole batch becomes visible again after its visibility timeout
            done = [m for m in messages if m["MessageId"] not in failed]
            for start in range(0, len(done), 10):
                chunk = done[start : start + 10]
                self._sqs.delete_message_batch(
                    QueueUrl=self._url,
                    Entries=[
                        {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(chunk)
                    ],
                )
            with self._lock:
                self.delivered += len(messages)
        except Exception:
            log.exception("settling a batch of %s failed", self._arn)
        finally:
            with self._lock:
                self.in_flight -= 1
            self._slots.release()

    def _record(self, message: dict[str, Any]) -> dict[str, Any]:
        return {
            "messageId": message["MessageId"],
            "receiptHandle": message["ReceiptHandle"],
            "body": message["Body"],
            "attributes": message.get("Attributes", {}),
            "messageAttributes": message.get("MessageAttributes", {}),
            "md5OfBody": message.get("MD5OfBody", ""),
            "eventSource": "aws:sqs",
            "eventSourceARN": self._arn,
            "awsRegion": self._region,
        }


def _daemon_thread(work: Callable[[], None]) -> None:
    threading.Thread(target=work, name="queue-invocation", daemon=True).start()


# --- DynamoDB TTL ---


class TtlReaper:
    """Deletes items whose TTL attribute has passed (moto never expires items)."""

    def __init__(self, ddb_client: Any, tables: list[tuple[str, str, list[str]]], clock: Callable[[], float]):
        self._ddb = ddb_client
        self._tables = tables  # (table name, ttl attribute, key attribute names)
        self._clock = clock
        self.deleted = 0

    def sweep(self) -> int:
        now = int(self._clock())
        removed = 0
        for table, attribute, keys in self._tables:
            names = {f"#k{i}": key for i, key in enumerate(keys)}
            pages = self._ddb.get_paginator("scan").paginate(
                TableName=table,
                FilterExpression="#ttl < :now",
                ExpressionAttributeNames={"#ttl": attribute, **names},
                ExpressionAttributeValues={":now": {"N": str(now)}},
                ProjectionExpression=", ".join(names),
            )
            for page in pages:
                for item in page.get("Items", []):
                    self._ddb.delete_item(TableName=table, Key={k: item[k] for k in keys})
                    removed += 1
        self.deleted += removed
        return removed
