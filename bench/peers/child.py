"""A long-lived helper process driven over its stdin/stdout, one JSON object a line each way:
the peers' app and scheduler run in processes of their own, so their CPU is theirs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]


def environment(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    env.update(extra)
    return env


class Child:
    def __init__(self, module: str, *args: str, env: dict[str, str] | None = None) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", module, *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd=REPO,
            env=env or environment(),
        )
        self.ask({"op": "ping"})

    @property
    def pid(self) -> int:
        return self.proc.pid

    def ask(self, request: dict[str, Any]) -> dict[str, Any]:
        assert self.proc.stdin and self.proc.stdout
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"{self.proc.args!r}: exited ({self.proc.poll()})")
        answer: dict[str, Any] = json.loads(line)
        if "error" in answer:
            raise RuntimeError(f"{self.proc.args!r}: {answer['error']}")
        return answer

    def stop(self, timeout: float = 20) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin
            self.proc.stdin.close()  # end of input: the child stops itself
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def serve(handlers: dict[str, Callable[[dict[str, Any]], dict[str, Any]]]) -> None:
    """The child's side: answer each request line until stdin closes."""
    out = sys.stdout
    sys.stdout = sys.stderr  # nothing else may write to the protocol's stream
    for line in sys.stdin:
        request = json.loads(line)
        try:
            answer = {"ok": True} if request["op"] == "ping" else handlers[request["op"]](request)
        except Exception as exc:  # reported to the driver, which stops the benchmark
            answer = {"error": f"{type(exc).__name__}: {exc}"}
        out.write(json.dumps(answer) + "\n")
        out.flush()
