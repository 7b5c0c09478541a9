"""jobsched's side: `jobsched local` (its defaults) in a process of its own, moto in the child
process local mode starts; jobs created one by one through the HTTP API, each with an HTTP
target that POSTs its envelope (the job's payload inside) to the receiver."""

from __future__ import annotations

import http.client
import json
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

from .child import REPO, environment
from .postgres import free_port
from .procfs import children_of

DEV_KEY = "jobsched-dev-key"  # local mode's default key (jobsched_local.config.DEV_KEY)
JOB_TYPE = "bench.peer"
BATCH = 100  # jobs a `POST /v1/jobs/batch` request (the API's most)


def iso(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class JobschedStack:
    name = "jobsched"
    settings = {
        "process": "`jobsched local` with its defaults: one process (API front, event-source glue,"
        " every function), moto in a child process",
        "worker": "the default queue's event source: batches of 10, up to 100 invocations at once,"
        " each record on a thread; polled every 0.2 s; tenant concurrency 50 leases",
        "store": "DynamoDB, SQS and streams on moto (in memory, one call at a time)",
        "create": "POST /v1/jobs/batch, 100 jobs a request, where the API has it, else POST /v1/jobs,"
        " one job a request; one keep-alive connection; the API's 50 requests/s per tenant limit on"
        " (a 429 is retried after its Retry-After)",
    }

    def __init__(self, config: Path | None = None, create_mode: str = "auto") -> None:
        self.create_mode = create_mode  # auto (batch when the API has it) | batch | single
        self.batch: bool | None = None
        self.config = config  # a local-mode settings file (`jobsched local --config`); None: defaults
        if config is not None:
            self.settings = {
                **self.settings,
                "process": f"`jobsched local --config {config}`: {config.read_text().strip()}",
            }
        self.proc: subprocess.Popen[bytes] | None = None
        self.port = free_port()
        self.moto_pid: int | None = None
        self._log: IO[bytes] | None = None
        self._conn: http.client.HTTPConnection | None = None

    def start(self) -> None:
        self._log = tempfile.TemporaryFile()  # noqa: SIM115  (kept open while local mode runs; closed in stop)
        moto_port = free_port()
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "jobsched_cli",
                "local",
                "--port",
                str(self.port),
                "--moto-port",
                str(moto_port),
                "--follow",
                "none",
                *(["--config", str(self.config)] if self.config else []),
            ],
            stdout=self._log,
            stderr=subprocess.STDOUT,
            cwd=REPO,
            env=environment(
                POWERTOOLS_LOG_LEVEL="WARNING", PYTHONPATH=str(REPO / "functions") + ":" + str(REPO)
            ),
        )
        deadline = time.monotonic() + 120
        while True:
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"jobsched local did not start:\n{self.log_text()}")
            try:
                status, _, _ = self._request("GET", "/v1/jobs?limit=1")
                if status == 200:
                    break
            except OSError:
                self._conn = None
            time.sleep(0.2)
        moto = children_of(self.proc.pid)
        self.moto_pid = moto[0] if moto else None

    def log_text(self) -> str:
        if self._log is None:
            return ""
        self._log.seek(0)
        return self._log.read().decode(errors="replace")[-4000:]

    def _request(self, method: str, path: str, body: Any = None) -> tuple[int, Any, http.client.HTTPResponse]:
        if self._conn is None:
            self._conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        data = json.dumps(body).encode() if body is not None else None
        self._conn.request(
            method, path, body=data, headers={"content-type": "application/json", "x-api-key": DEV_KEY}
        )
        response = self._conn.getresponse()
        text = response.read()
        return response.status, (json.loads(text) if text else None), response

    def create(self, jobs: list[tuple[str, float]], url: str) -> dict[str, Any]:
        bodies = [
            {
                "name": job_id,
                "type": JOB_TYPE,
                "runAt": iso(due),
                "payload": {"id": job_id},
                "target": {"kind": "http", "url": url},
            }
            for job_id, due in jobs
        ]
        if self.batch is None:
            self.batch = self._has_batch()
        started = time.perf_counter()
        throttled = 0
        if self.batch:
            for i in range(0, len(bodies), BATCH):
                throttled += self._create_batch(bodies[i : i + BATCH])
        else:
            for body in bodies:
                throttled += self._post("/v1/jobs", body, 201)[1]
        return {"seconds": time.perf_counter() - started, "throttled": throttled, "batch": self.batch}

    def _post(self, path: str, body: Any, want: int) -> tuple[Any, int]:
        """The answer of a POST, after as many 429s (each waited out) as it took."""
        throttled = 0
        while True:
            status, answer, response = self._request("POST", path, body)
            if status == want:
                return answer, throttled
            if status == 429:
                throttled += 1
                time.sleep(float(response.getheader("Retry-After") or 0.2))
                continue
            raise RuntimeError(f"POST {path} failed: {status} {answer}")

    def _create_batch(self, bodies: list[dict[str, Any]]) -> int:
        throttled = 0
        while bodies:
            answer, waited = self._post("/v1/jobs/batch", {"jobs": bodies}, 200)
            throttled += waited
            again = [bodies[item["index"]] for item in answer["items"] if item["status"] == 429]
            refused = [item for item in answer["items"] if item["status"] not in (200, 201, 429)]
            if refused:
                raise RuntimeError(f"batch create refused: {refused[0]}")
            if again:
                throttled += 1
                time.sleep(0.2)
            bodies = again
        return throttled

    def _has_batch(self) -> bool:
        """Whether this API has `POST /v1/jobs/batch` (up to 100 jobs a request) and the
        benchmark may use it (`--jobsched-create`)."""
        if self.create_mode != "auto":
            return self.create_mode == "batch"
        status, _answer, _response = self._request("POST", "/v1/jobs/batch", {"jobs": []})
        return status not in (404, 405)

    def groups(self) -> dict[str, tuple[int, tuple[int, ...]]]:
        assert self.proc is not None
        out: dict[str, tuple[int, tuple[int, ...]]] = {
            "local mode (moto left out)": (self.proc.pid, (self.moto_pid,) if self.moto_pid else ())
        }
        if self.moto_pid:
            out["moto"] = (self.moto_pid, ())
        return out

    def own_groups(self) -> tuple[str, ...]:
        """The groups that are jobsched's own code (the goal on CPU compares these)."""
        return ("local mode (moto left out)",)

    def stop(self) -> None:
        if self._conn is not None:
            self._conn.close()
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self._log is not None:
            self._log.close()
            self._log = None
