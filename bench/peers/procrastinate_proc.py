"""procrastinate's app process, as `python -m bench.peers.procrastinate_proc`: applies the
schema and defers jobs on request (bench.peers.child's protocol)."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

from bench.peers.child import serve
from bench.peers.procrastinate_app import app, bench_effect


def _schema(_request: dict[str, Any]) -> dict[str, Any]:
    app.schema_manager.apply_schema()
    return {"ok": True}


def _defer(request: dict[str, Any]) -> dict[str, Any]:
    """Each job deferred on its own (one INSERT and its NOTIFY), as an app defers its jobs."""
    started = time.perf_counter()
    for job_id, due in request["jobs"]:
        bench_effect.configure(schedule_at=datetime.fromtimestamp(due, UTC)).defer(
            url=request["url"], job_id=job_id
        )
    return {"seconds": time.perf_counter() - started}


if __name__ == "__main__":
    with app.open():
        serve({"schema": _schema, "defer": _defer})
