"""The billing team's Python handlers, run by the scheduler's own worker: shipped beside it by
`JobScheduler(handler_code=..., handler_modules=["billing_jobs.handlers"])` in app.py, and run
in local mode with `jobsched local --handlers-path handlers` and this module in
`handler_modules` (docs/guides/handlers.md)."""

from __future__ import annotations

from typing import Any

import jobsched
from jobsched.targets import Invocation


@jobsched.handler("statement.close")
def close_statement(payload: Any, invocation: Invocation) -> dict[str, Any]:
    """Closes the statement period the run is scheduled for. The period comes from the run's
    scheduled instant (the same for every attempt), so a retry closes the same period; a
    payload without an account cannot succeed on any attempt."""
    if not isinstance(payload, dict) or not isinstance(payload.get("account"), str):
        raise jobsched.PermanentError("payload.account: an account id is required", error_class="BadPayload")
    period = invocation.scheduled_for.strftime("%Y-%m")
    return {"account": payload["account"], "period": period, "closedBy": invocation.run_key}
