"""Routes for external workers: claim runs of their types under a lease, keep the lease
alive, and complete the run with the fence the claim returned."""

from __future__ import annotations

from typing import Annotated

from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.api_gateway import Router
from aws_lambda_powertools.event_handler.openapi.params import Body

from ...api_models.requests import ClaimBody, CompleteBody, HeartbeatBody
from ...api_models.views import HeartbeatView, LeaseList, LeaseView, RunView
from ...wiring import container
from .common import CHANGE_ERRORS, RUN_KEY, documented, json_response, run_key_of
from .identity import tenant_of

router = Router()


@router.post("/v1/leases", responses=documented({200: ("OK", LeaseList)}, CHANGE_ERRORS))
def claim_leases(body: Annotated[ClaimBody, Body()]) -> Response[LeaseList]:
    runs = container().run_service.claim(
        tenant_of(router.current_event), body.types, body.max_runs, body.lease_seconds, body.worker_id
    )
    return json_response(200, LeaseList(leases=[LeaseView.from_run(r) for r in runs]))


@router.post(
    "/v1/leases/<run_key>/heartbeat", responses=documented({200: ("OK", HeartbeatView)}, CHANGE_ERRORS)
)
def heartbeat_lease(
    run_key: Annotated[str, RUN_KEY], body: Annotated[HeartbeatBody, Body()]
) -> Response[HeartbeatView]:
    run = container().run_service.heartbeat(
        tenant_of(router.current_event), run_key_of(run_key), body.fence, body.lease_seconds
    )
    return json_response(200, HeartbeatView.from_run(run))


@router.post("/v1/leases/<run_key>/complete", responses=documented({200: ("OK", RunView)}, CHANGE_ERRORS))
def complete_lease(
    run_key: Annotated[str, RUN_KEY], body: Annotated[CompleteBody, Body()]
) -> Response[RunView]:
    error = body.error
    run = container().run_service.complete(
        tenant_of(router.current_event),
        run_key_of(run_key),
        body.fence,
        body.outcome,
        result=body.result,
        error_class=error.error_class if error else None,
        error_message=error.message if error else None,
        retryable=error.retryable if error else True,
    )
    return json_response(200, RunView.from_run(run))
