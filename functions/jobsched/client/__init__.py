"""A typed client for the jobsched HTTP API.

    from jobsched.client import Client, NotFound

    client = Client("http://127.0.0.1:8080", api_key="jobsched-dev-key")
    job = client.create_job({"name": "nightly", "type": "report.build", "cron": "0 9 * * *"})
    job = client.pause_job(job)                  # If-Match: the version `job` was read at
    for run in client.iter_runs(job.job_id):     # every page, fetched as iterated
        ...

Requests are built from, and answers parsed into, the server's own models
(`jobsched.api_models`); see `Client` for every operation and `errors` for what is raised."""

from ..api_models.requests import (
    MAX_BATCH_JOBS,
    BulkDeadLettersBody,
    JobBody,
    RedriveBody,
    ReportedError,
)
from ..api_models.views import (
    BackfillView,
    BulkDeadLettersView,
    CreatedJobView,
    HeartbeatView,
    JobBatchItemView,
    JobBatchView,
    JobList,
    JobSummaryView,
    JobView,
    LeaseView,
    RunDetailView,
    RunList,
    RunSummaryList,
    RunSummaryView,
    RunView,
    SigningSecretView,
)
from .api import UNSET, Client
from .errors import (
    ApiError,
    ApiUnreachable,
    ClientError,
    Conflict,
    Forbidden,
    Invalid,
    NotFound,
    PreconditionRequired,
    RateLimited,
    RedirectRefused,
    ServerError,
    SigningUnavailable,
    Unauthorized,
    Unavailable,
    UnexpectedResponse,
    VersionMismatch,
)
from .http import Connection, HttpReply, Transport, UrllibTransport

__all__ = [
    "MAX_BATCH_JOBS",
    "UNSET",
    "ApiError",
    "ApiUnreachable",
    "BackfillView",
    "BulkDeadLettersBody",
    "BulkDeadLettersView",
    "Client",
    "ClientError",
    "Conflict",
    "Connection",
    "CreatedJobView",
    "Forbidden",
    "HeartbeatView",
    "HttpReply",
    "Invalid",
    "JobBatchItemView",
    "JobBatchView",
    "JobBody",
    "JobList",
    "JobSummaryView",
    "JobView",
    "LeaseView",
    "NotFound",
    "PreconditionRequired",
    "RateLimited",
    "RedirectRefused",
    "RedriveBody",
    "ReportedError",
    "RunDetailView",
    "RunList",
    "RunSummaryList",
    "RunSummaryView",
    "RunView",
    "ServerError",
    "SigningSecretView",
    "SigningUnavailable",
    "Transport",
    "Unauthorized",
    "Unavailable",
    "UnexpectedResponse",
    "UrllibTransport",
    "VersionMismatch",
]
