"""A moto server on loopback holding the same tables, streams and queues the stack defines.

It binds a loopback address only, grants no CORS and serves the AWS SDKs and the CLI only:
a request from a web page (an `Origin` or `Sec-Fetch-*` header) or addressed to another
host name (DNS rebinding) is refused before moto sees it (loopback.LoopbackOnly).

It runs single-threaded: moto's in-memory backends are not safe under concurrent requests.
By default it runs in a process of its own (`MotoProcess`): it then serves calls on its own
interpreter lock instead of sharing one with every worker thread waiting on it, which is what
a burst of runs is bound by (bench/report.md, start lag)."""

from __future__ import annotations

import errno
import json
import logging
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import boto3
from jobsched.domain.events import SOURCE_PREFIX
from jobsched.store.schema import ALL_TABLES, EVENT_BUS_NAME, QUEUES
from moto.moto_server import werkzeug_app
from moto.moto_server.werkzeug_app import DomainDispatcherApplication, MotoRequestHandler, create_backend_app
from werkzeug.serving import make_server

from .background import BackgroundServer
from .loopback import LoopbackOnly, host_name, is_loopback
from .moto_speedups import install as install_speedups
from .moto_transactions import install as install_fast_transactions


def _moto_server(host: str, port: int, fd: int) -> Any:
    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # one line per AWS call is noise
    install_fast_transactions()  # moto copies whole tables per transaction otherwise
    install_speedups()  # work per request that grows with the table, the queue, moto itself
    # moto's own switch: its service apps are built without flask-cors (which answers every
    # Origin); LoopbackOnly also takes any CORS header off what is answered.
    werkzeug_app.DISABLE_GLOBAL_CORS = True
    return make_server(
        host,
        port,
        LoopbackOnly(DomainDispatcherApplication(create_backend_app)),
        threaded=False,
        request_handler=MotoRequestHandler,
        fd=fd,
    )


def _reset(url: str) -> None:
    # moto keeps its data in the process, not in the server: a second server in the same
    # process (tests, benchmarks) would find the first one's tables. Start empty.
    request = urllib.request.Request(f"{url}/moto-api/reset", method="POST")
    with urllib.request.urlopen(request, timeout=10) as response:
        response.read()


class MotoServer(BackgroundServer):
    """The moto server on a thread of this process."""

    def __init__(self, host: str, port: int) -> None:
        # Bound here rather than by werkzeug, which answers a taken port with sys.exit(1).
        listener = _listen(host, port)
        try:
            server = _moto_server(host, port, listener.fileno())
        finally:
            listener.close()  # the server holds its own duplicate of the socket
        super().__init__(server, "moto")

    def start(self) -> None:
        super().start()
        _reset(self.url)


class MotoProcess:
    """The moto server in a child process, on a socket bound here (so a taken port fails the
    same way, and port 0 gets its number before the child starts). Stopped with the runtime;
    a child whose parent died exits when its stdin closes."""

    def __init__(self, host: str, port: int) -> None:
        self._listener = _listen(host, port)
        bound_host, bound_port = self._listener.getsockname()[:2]
        self.url = f"http://{bound_host}:{bound_port}"
        self._process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        fd = self._listener.fileno()
        functions_dir = str(Path(__file__).resolve().parents[1])
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([functions_dir, os.environ.get("PYTHONPATH", "")])}
        host, port = self._listener.getsockname()[:2]
        self._process = subprocess.Popen(
            [sys.executable, "-m", "jobsched_local.moto_backend", host, str(port), str(fd)],
            pass_fds=(fd,),
            stdin=subprocess.PIPE,
            env=env,
        )
        self._listener.close()  # the child holds its own copy
        deadline = time.monotonic() + 60
        while True:
            try:
                _reset(self.url)
                return
            except OSError:
                if self._process.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError("the moto server process did not start") from None
                time.sleep(0.05)

    def stop(self) -> None:
        if self._process is None:
            return
        self._process.terminate()
        try:
            self._process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait()
        self._process = None


def _serve_child(host: str, port: int, fd: int) -> None:
    import threading

    server = _moto_server(host, port, fd)

    def exit_with_parent() -> None:
        sys.stdin.buffer.read()  # returns when the parent closes the pipe (or dies)
        os._exit(0)

    threading.Thread(target=exit_with_parent, daemon=True).start()
    server.serve_forever()


def _listen(host: str, port: int) -> socket.socket:
    if not is_loopback(host_name(host)):
        # moto has no authentication: on any other address it serves every tenant's data.
        raise ValueError(f"host {host!r}: the moto server binds a loopback address only")
    listener = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        listener.bind((host, port))
        listener.listen(128)
    except OSError as exc:
        listener.close()
        if exc.errno == errno.EADDRINUSE:
            raise OSError(exc.errno, f"moto port {port} is already in use") from None
        raise
    return listener


def provision(endpoint_url: str | None, region: str) -> dict[str, Any]:
    """Create every table (with TTL) and every queue with its DLQ and redrive policy, from the
    shared schema, on the moto server at `endpoint_url` (None: boto3's own endpoints, which an
    in-process moto serves). Returns the names and URLs the functions need, and in
    `own_queue_urls` those of the queues no function sends to (the notifications DLQ and the
    events tail), which no tenant target may name either (Settings.own_queue_urls)."""
    ddb = boto3.client("dynamodb", endpoint_url=endpoint_url, region_name=region)
    sqs = boto3.client("sqs", endpoint_url=endpoint_url, region_name=region)
    tables: dict[str, str] = {}
    streams: dict[str, str] = {}
    for spec in ALL_TABLES:
        description = ddb.create_table(**spec.create_table_request())["TableDescription"]
        tables[spec.logical_id] = spec.default_name
        if spec.ttl_attribute:
            ddb.update_time_to_live(
                TableName=spec.default_name,
                TimeToLiveSpecification={"Enabled": True, "AttributeName": spec.ttl_attribute},
            )
        if spec.stream:
            streams[spec.logical_id] = description["LatestStreamArn"]
    queue_urls, dlq_urls, queue_arns = create_queues(sqs)
    notifications_url, notifications_arn, notifications_dlq_url = create_notifications_queue(sqs)
    events_tail_url = create_event_bus(
        boto3.client("events", endpoint_url=endpoint_url, region_name=region), sqs
    )
    return {
        "notifications_url": notifications_url,
        "notifications_arn": notifications_arn,
        "tables": tables,
        "streams": streams,
        "queue_urls": queue_urls,
        "dlq_urls": dlq_urls,
        "queue_arns": queue_arns,
        "events_tail_url": events_tail_url,
        "own_queue_urls": (notifications_dlq_url, events_tail_url),
    }


EVENTS_TAIL_QUEUE = "jobsched-events-tail"
NOTIFICATIONS_QUEUE = "jobsched-notifications"
NOTIFICATIONS_DLQ = "jobsched-notifications-dlq"
NOTIFICATIONS_VISIBILITY_SECONDS = 30  # local mode retries a failed delivery sooner than the stack
NOTIFICATIONS_MAX_RECEIVES = 5


def create_notifications_queue(sqs: Any) -> tuple[str, str, str]:
    """The notifications queue (services.notifications) with its DLQ: (URL, ARN, the DLQ's URL)."""
    dlq_url = sqs.create_queue(QueueName=NOTIFICATIONS_DLQ)["QueueUrl"]
    dlq_arn = sqs.get_queue_attributes(QueueUrl=dlq_url, AttributeNames=["QueueArn"])["Attributes"][
        "QueueArn"
    ]
    redrive = {"deadLetterTargetArn": dlq_arn, "maxReceiveCount": str(NOTIFICATIONS_MAX_RECEIVES)}
    url = sqs.create_queue(
        QueueName=NOTIFICATIONS_QUEUE,
        Attributes={
            "VisibilityTimeout": str(NOTIFICATIONS_VISIBILITY_SECONDS),
            "RedrivePolicy": json.dumps(redrive),
        },
    )["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    return str(url), str(arn), str(dlq_url)


def create_event_bus(events: Any, sqs: Any) -> str:
    """The stack's event bus and its archive, and what local mode adds: a rule sending every
    jobsched event to a queue that `jobsched events tail` reads through the local front.
    Returns that queue's URL."""
    bus_arn = events.create_event_bus(Name=EVENT_BUS_NAME)["EventBusArn"]
    events.create_archive(ArchiveName=f"{EVENT_BUS_NAME}-archive", EventSourceArn=bus_arn, RetentionDays=1)
    url = sqs.create_queue(QueueName=EVENTS_TAIL_QUEUE)["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    # A pattern, never a schedule: moto matches a schedule-only rule against every event.
    events.put_rule(
        Name=EVENTS_TAIL_QUEUE,
        EventBusName=EVENT_BUS_NAME,
        EventPattern=json.dumps({"source": [{"prefix": SOURCE_PREFIX}]}),
    )
    events.put_targets(
        Rule=EVENTS_TAIL_QUEUE, EventBusName=EVENT_BUS_NAME, Targets=[{"Id": "tail", "Arn": arn}]
    )
    return str(url)


def create_queues(sqs: Any) -> tuple[dict[str, str], dict[str, str], dict[str, str]]:
    """Every queue of the schema with its DLQ and redrive policy: (URLs, DLQ URLs, ARNs) by key.
    Local mode, the tests, the chaos harness and the benchmarks all build queues with this."""
    urls: dict[str, str] = {}
    dlq_urls: dict[str, str] = {}
    arns: dict[str, str] = {}
    for queue in QUEUES:
        dlq_url = sqs.create_queue(QueueName=queue.dlq_name)["QueueUrl"]
        dlq_arn = sqs.get_queue_attributes(QueueUrl=dlq_url, AttributeNames=["QueueArn"])["Attributes"][
            "QueueArn"
        ]
        redrive = {"deadLetterTargetArn": dlq_arn, "maxReceiveCount": str(queue.max_receive_count)}
        url = sqs.create_queue(
            QueueName=queue.default_name,
            Attributes={
                "VisibilityTimeout": str(queue.visibility_timeout),
                "RedrivePolicy": json.dumps(redrive),
            },
        )["QueueUrl"]
        urls[queue.key], dlq_urls[queue.key] = url, dlq_url
        arns[queue.key] = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"][
            "QueueArn"
        ]
    return urls, dlq_urls, arns


if __name__ == "__main__":
    _serve_child(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))
