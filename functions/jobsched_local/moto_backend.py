"""A moto server on loopback holding the same tables, streams and queues the stack defines.

It runs single-threaded: moto's in-memory backends are not safe under concurrent requests,
and local mode's traffic is small enough that serialising it costs nothing noticeable."""

from __future__ import annotations

import errno
import json
import logging
import socket
import urllib.request
from typing import Any

import boto3
from jobsched.store.schema import ALL_TABLES, QUEUES
from moto.moto_server.werkzeug_app import DomainDispatcherApplication, MotoRequestHandler, create_backend_app
from werkzeug.serving import make_server

from .background import BackgroundServer
from .moto_transactions import install as install_fast_transactions


class MotoServer(BackgroundServer):
    def __init__(self, host: str, port: int) -> None:
        logging.getLogger("werkzeug").setLevel(logging.WARNING)  # one line per AWS call is noise
        install_fast_transactions()  # moto copies whole tables per transaction otherwise
        # Bound here rather than by werkzeug, which answers a taken port with sys.exit(1).
        listener = _listen(host, port)
        try:
            server = make_server(
                host,
                port,
                DomainDispatcherApplication(create_backend_app),
                threaded=False,
                request_handler=MotoRequestHandler,
                fd=listener.fileno(),
            )
        finally:
            listener.close()  # the server holds its own duplicate of the socket
        super().__init__(server, "moto")

    def start(self) -> None:
        super().start()
        # moto keeps its data in the process, not in the server: a second server in the same
        # process (tests, benchmarks) would find the first one's tables. Start empty.
        request = urllib.request.Request(f"{self.url}/moto-api/reset", method="POST")
        with urllib.request.urlopen(request, timeout=10) as response:
            response.read()


def _listen(host: str, port: int) -> socket.socket:
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


def provision(endpoint_url: str, region: str) -> dict[str, Any]:
    """Create every table (with TTL) and every queue with its DLQ and redrive policy, from the
    shared schema. Returns the names and URLs the functions need."""
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
    return {
        "tables": tables,
        "streams": streams,
        "queue_urls": queue_urls,
        "dlq_urls": dlq_urls,
        "queue_arns": queue_arns,
    }


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
