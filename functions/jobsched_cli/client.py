"""A small client for the jobsched HTTP API: local mode's `x-api-key`, or SigV4 for a stack
deployed behind API Gateway IAM auth. Stdlib HTTP; botocore only for signing."""

from __future__ import annotations

import ipaddress
import json
import re
import urllib.error
import urllib.request
from collections.abc import Iterator
from http import HTTPStatus
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

USER_AGENT = "jobsched-client/0.1"
_EXECUTE_API_HOST = re.compile(r"\.execute-api\.([a-z0-9-]+)\.amazonaws\.com(?:\.cn)?$")


class ApiError(Exception):
    """A non-2xx answer. `code`, `message` and `errors` come from the server's error body."""

    def __init__(self, status: int, body: Any) -> None:
        self.status = status
        self.body = body
        data = body if isinstance(body, dict) else {}
        try:
            phrase = HTTPStatus(status).phrase
        except ValueError:
            phrase = "error"
        # API Gateway's own errors carry only a message; fall back to the status phrase.
        self.code: str = str(data.get("code") or phrase.lower().replace(" ", "_"))
        text = data.get("message") or data.get("Message")
        if text is None:
            text = body if isinstance(body, str) and body else phrase
        self.message: str = str(text)
        raw_errors = data.get("errors")
        self.errors: list[dict[str, str]] = (
            [e for e in raw_errors if isinstance(e, dict)] if raw_errors else []
        )
        super().__init__(f"{status} {self.code}: {self.message}")


class ApiUnreachable(Exception):
    """The endpoint could not be reached (no answer at all, as opposed to an error answer)."""


class SigningUnavailable(Exception):
    """SigV4 was asked for but there are no credentials or no region to sign with."""


def is_loopback(endpoint: str) -> bool:
    host = urlsplit(endpoint).hostname or ""
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def quote_segment(value: str) -> str:
    """Run keys carry ':' and '@'; encode them so they stay one path segment."""
    return quote(value, safe="")


class ApiClient:
    def __init__(
        self,
        endpoint: str,
        *,
        api_key: str | None = None,
        sigv4: bool = False,
        region: str | None = None,
        timeout: float = 30,
    ) -> None:
        self.endpoint = endpoint.rstrip("/")
        self.api_key = api_key
        self.sigv4 = sigv4
        self.timeout = timeout
        self._region = region
        self._credentials: Any = None
        handlers: list[urllib.request.BaseHandler] = []
        if is_loopback(self.endpoint):
            # A proxy from the environment must never see local mode's traffic.
            handlers.append(urllib.request.ProxyHandler({}))
        self._opener = urllib.request.build_opener(*handlers)

    # --- transport ---

    @property
    def region(self) -> str:
        if self._region:
            return self._region
        match = _EXECUTE_API_HOST.search(urlsplit(self.endpoint).hostname or "")
        if match:
            self._region = match.group(1)
            return self._region
        import botocore.session

        configured = botocore.session.Session().get_config_variable("region")
        if not configured:
            raise SigningUnavailable("SigV4 needs a region: pass --region or set AWS_REGION")
        self._region = str(configured)
        return self._region

    def build_request(
        self,
        method: str,
        path: str,
        body: Any = None,
        headers: dict[str, str] | None = None,
        query: dict[str, Any] | None = None,
    ) -> urllib.request.Request:
        url = self.endpoint + path
        params = {k: v for k, v in (query or {}).items() if v is not None}
        if params:
            url += "?" + urlencode(params)
        data = None if body is None else json.dumps(body, separators=(",", ":")).encode()
        all_headers = {"accept": "application/json", "user-agent": USER_AGENT}
        if data is not None:
            all_headers["content-type"] = "application/json"
        if self.api_key:
            all_headers["x-api-key"] = self.api_key
        all_headers.update({k.lower(): v for k, v in (headers or {}).items()})
        if self.sigv4:
            all_headers = self.sign(method.upper(), url, data, all_headers)
        return urllib.request.Request(url, data=data, headers=all_headers, method=method.upper())

    def sign(self, method: str, url: str, data: bytes | None, headers: dict[str, str]) -> dict[str, str]:
        from botocore.auth import SigV4Auth
        from botocore.awsrequest import AWSRequest

        if self._credentials is None:
            import botocore.session

            self._credentials = botocore.session.Session().get_credentials()
            if self._credentials is None:
                raise SigningUnavailable("SigV4 needs AWS credentials (environment, profile or role)")
        request = AWSRequest(method=method, url=url, data=data or b"", headers=headers)
        # Frozen per request: refreshable credentials must not change between key and secret.
        SigV4Auth(self._credentials.get_frozen_credentials(), "execute-api", self.region).add_auth(request)
        return dict(request.headers.items())

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        headers: dict[str, str] | None = None,
        query: dict[str, Any] | None = None,
    ) -> tuple[int, dict[str, str], Any]:
        """Send one request; returns (status, headers with lower-case names, parsed body).
        Raises ApiError on a non-2xx answer and ApiUnreachable when there is no answer."""
        prepared = self.build_request(method, path, body, headers, query)
        try:
            with self._opener.open(prepared, timeout=self.timeout) as response:
                status, raw, reply_headers = response.status, response.read(), response.headers
        except urllib.error.HTTPError as exc:
            status, raw, reply_headers = exc.code, exc.read(), exc.headers
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise ApiUnreachable(f"cannot reach {self.endpoint}: {reason}") from exc
        parsed = _parse(raw)
        lowered = {k.lower(): v for k, v in reply_headers.items()} if reply_headers else {}
        if not 200 <= status < 300:
            raise ApiError(status, parsed)
        return status, lowered, parsed

    def _call(self, method: str, path: str, body: Any = None, **kw: Any) -> Any:
        return self.request(method, path, body, **kw)[2]

    def _pages(self, path: str, query: dict[str, Any]) -> Iterator[dict[str, Any]]:
        cursor = query.get("cursor")
        while True:
            page = self._call("GET", path, query={**query, "cursor": cursor})
            yield from page.get("items") or []
            cursor = page.get("nextCursor")
            if not cursor:
                return

    def _listing(self, path: str, query: dict[str, Any], all_pages: bool) -> dict[str, Any]:
        if not all_pages:
            page: dict[str, Any] = self._call("GET", path, query=query)
            return page
        return {"items": list(self._pages(path, query)), "nextCursor": None}

    # --- jobs ---

    def create_job(self, body: dict[str, Any], *, idempotency_key: str | None = None) -> dict[str, Any]:
        headers = {"idempotency-key": idempotency_key} if idempotency_key else None
        job: dict[str, Any] = self._call("POST", "/v1/jobs", body, headers=headers)
        return job

    def list_jobs(
        self,
        *,
        state: str | None = None,
        limit: int | None = None,
        cursor: str | None = None,
        all_pages: bool = False,
    ) -> dict[str, Any]:
        """One page ({"items", "nextCursor"}), or every page with all_pages."""
        query = {"state": state, "limit": limit, "cursor": cursor}
        return self._listing("/v1/jobs", query, all_pages)

    def iter_jobs(self, *, state: str | None = None, page_size: int = 100) -> Iterator[dict[str, Any]]:
        return self._pages("/v1/jobs", {"state": state, "limit": page_size})

    def get_job(self, job_id: str) -> dict[str, Any]:
        job: dict[str, Any] = self._call("GET", f"/v1/jobs/{quote_segment(job_id)}")
        return job

    def update_job(self, job_id: str, patch: dict[str, Any], if_match: int | str) -> dict[str, Any]:
        """A JSON merge patch; `if_match` is the job's current version."""
        headers = {"if-match": _etag(if_match), "content-type": "application/merge-patch+json"}
        job: dict[str, Any] = self._call("PATCH", f"/v1/jobs/{quote_segment(job_id)}", patch, headers=headers)
        return job

    def cancel_job(self, job_id: str, *, if_match: int | str | None = None) -> dict[str, Any]:
        return self._job_action("DELETE", job_id, "", if_match)

    def pause(self, job_id: str, *, if_match: int | str | None = None) -> dict[str, Any]:
        return self._job_action("POST", job_id, "/pause", if_match)

    def resume(self, job_id: str, *, if_match: int | str | None = None) -> dict[str, Any]:
        return self._job_action("POST", job_id, "/resume", if_match)

    def _job_action(
        self, method: str, job_id: str, suffix: str, if_match: int | str | None
    ) -> dict[str, Any]:
        headers = {"if-match": _etag(if_match)} if if_match is not None else None
        job: dict[str, Any] = self._call(method, f"/v1/jobs/{quote_segment(job_id)}{suffix}", headers=headers)
        return job

    def trigger(self, job_id: str) -> dict[str, Any]:
        run: dict[str, Any] = self._call("POST", f"/v1/jobs/{quote_segment(job_id)}/trigger")
        return run

    def backfill(self, job_id: str, start: str, end: str) -> dict[str, Any]:
        result: dict[str, Any] = self._call(
            "POST", f"/v1/jobs/{quote_segment(job_id)}/backfill", {"start": start, "end": end}
        )
        return result

    def job_summary(self, job_id: str) -> dict[str, Any]:
        summary: dict[str, Any] = self._call("GET", f"/v1/jobs/{quote_segment(job_id)}/summary")
        return summary

    # --- runs ---

    def list_runs(
        self,
        job_id: str,
        *,
        limit: int | None = None,
        cursor: str | None = None,
        all_pages: bool = False,
        view: str | None = None,
    ) -> dict[str, Any]:
        """A job's runs in `view` (`history`, the API's default: due by now, newest first;
        `upcoming`; `all`)."""
        path = f"/v1/jobs/{quote_segment(job_id)}/runs"
        return self._listing(path, {"limit": limit, "cursor": cursor, "view": view}, all_pages)

    def list_runs_across_jobs(
        self,
        filters: dict[str, Any],
        *,
        limit: int | None = None,
        cursor: str | None = None,
        all_pages: bool = False,
    ) -> dict[str, Any]:
        """The tenant's runs across its jobs (`GET /v1/runs`), `filters` as its query names
        them (`state`, `jobId`, `type`, `trigger`, `errorClass`, `timeField`, `since`, `until`)."""
        return self._listing("/v1/runs", {**filters, "limit": limit, "cursor": cursor}, all_pages)

    def get_run(self, run_key: str) -> dict[str, Any]:
        """The run with its attempts and transitions."""
        run: dict[str, Any] = self._call("GET", f"/v1/runs/{quote_segment(run_key)}")
        return run

    def dead_letters(
        self, *, limit: int | None = None, cursor: str | None = None, all_pages: bool = False
    ) -> dict[str, Any]:
        return self._listing("/v1/dead-letters", {"limit": limit, "cursor": cursor}, all_pages)

    def redrive(
        self, run_key: str, *, reason: str | None = None, fix: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        """`POST /v1/runs/{key}/redrive`; `fix` carries `target` and/or `payload` to run with."""
        body: dict[str, Any] = {**(fix or {}), **({"reason": reason} if reason is not None else {})}
        run: dict[str, Any] = self._call("POST", f"/v1/runs/{quote_segment(run_key)}/redrive", body)
        return run

    def bulk_dead_letters(self, action: str, body: dict[str, Any]) -> dict[str, Any]:
        """`POST /v1/dead-letters/<action>` (`redrive` or `cancel`) with `body` as the API
        names its fields; the request's outcome."""
        outcome: dict[str, Any] = self._call("POST", f"/v1/dead-letters/{action}", body)
        return outcome

    def cancel_run(self, run_key: str) -> dict[str, Any]:
        run: dict[str, Any] = self._call("POST", f"/v1/runs/{quote_segment(run_key)}/cancel")
        return run

    # --- leases (external workers) ---

    def claim(
        self, types: list[str], worker_id: str, *, max_runs: int = 1, lease_seconds: int = 60
    ) -> list[dict[str, Any]]:
        body = {"types": types, "workerId": worker_id, "max": max_runs, "leaseSeconds": lease_seconds}
        leases: list[dict[str, Any]] = self._call("POST", "/v1/leases", body)["leases"]
        return leases

    def heartbeat(self, run_key: str, fence: int, *, lease_seconds: int = 60) -> dict[str, Any]:
        body = {"fence": fence, "leaseSeconds": lease_seconds}
        result: dict[str, Any] = self._call("POST", f"/v1/leases/{quote_segment(run_key)}/heartbeat", body)
        return result

    def complete(
        self,
        run_key: str,
        fence: int,
        outcome: str,
        *,
        result: Any = None,
        error: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """`outcome` is "succeeded" or "failed"; `error` is {"class", "message", "retryable"}."""
        body: dict[str, Any] = {"fence": fence, "outcome": outcome}
        if result is not None:
            body["result"] = result
        if error is not None:
            body["error"] = error
        run: dict[str, Any] = self._call("POST", f"/v1/leases/{quote_segment(run_key)}/complete", body)
        return run

    def local_events(self, after: int, *, limit: int = 100) -> dict[str, Any]:
        """Local mode only: the caller's run and job events the bus received after position
        `after` ({"items": [CloudEvent, ...], "cursor": N}). A deployed stack answers 404."""
        page: dict[str, Any] = self._call("GET", "/local/events", query={"after": after, "limit": limit})
        return page

    def openapi(self) -> dict[str, Any]:
        document: dict[str, Any] = self._call("GET", "/openapi.json")
        return document

    def docs_page(self) -> str:
        """The Swagger UI page: one self-contained HTML file (scripts and document inline)."""
        page = self._call("GET", "/docs", headers={"accept": "text/html"})
        return page if isinstance(page, str) else json.dumps(page)


def _etag(version: int | str) -> str:
    text = str(version).strip()
    return text if text.startswith(('"', "W/")) else f'"{text}"'


def _parse(raw: bytes) -> Any:
    if not raw:
        return None
    text = raw.decode("utf-8", errors="replace")
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text
