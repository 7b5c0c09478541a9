"""Local mode's moto server in a process of its own: it serves, it refuses a taken port as the
in-process server does, and it is gone once stopped."""

from __future__ import annotations

import socket

import boto3
import pytest
from jobsched_local.moto_backend import MotoProcess

pytestmark = pytest.mark.integration


def test_the_moto_process_serves_until_stopped():
    moto = MotoProcess("127.0.0.1", 0)
    moto.start()
    try:
        sqs = boto3.client(
            "sqs",
            endpoint_url=moto.url,
            region_name="us-east-1",
            aws_access_key_id="local",
            aws_secret_access_key="local",
        )
        url = sqs.create_queue(QueueName="scratch")["QueueUrl"]
        sqs.send_message(QueueUrl=url, MessageBody="hello")
        assert [m["Body"] for m in sqs.receive_message(QueueUrl=url)["Messages"]] == ["hello"]
        process = moto._process
        assert process is not None and process.poll() is None
    finally:
        moto.stop()
    assert process.poll() is not None  # terminated, not left behind
    port = int(moto.url.rsplit(":", 1)[1])
    with socket.socket() as probe, pytest.raises(OSError):
        probe.connect(("127.0.0.1", port))


def test_a_taken_port_is_refused_by_name():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        with pytest.raises(OSError, match=f"moto port {port} is already in use"):
            MotoProcess("127.0.0.1", port)
