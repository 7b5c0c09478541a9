"""The API as plain JSON (dicts), for the end-to-end and browser suites, which check answers as
the server wrote them. The exchange itself (authentication, SigV4, retries, errors) is
`jobsched.client`'s Connection. The CLI's commands and the worker SDK (`jobsched.worker`)
use the typed `jobsched.client.Client` instead."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from jobsched.client.errors import ApiError, ApiUnreachable, SigningUnavailable
from jobsched.client.http import Connection, etag, is_loopback, quote_segment

__all__ = [
    "ApiClient",
    "ApiError",
    "ApiUnreachable",
    "SigningUnavailable",
    "is_loopback",
    "quote_segment",
]


class ApiClient(Connection):
    """Every operation of the API, answers as parsed JSON. Raises what Connection.request
    raises (ApiError and its subclasses, ApiUnreachable, SigningUnavailable)."""

    def _call(self, method: str, path: str, body: Any = None, **kw: Any) -> Any:
        return self.request(method, path, body, **kw).body

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
        repeatable = bool(idempotency_key or body.get("idempotencyKey"))
        job: dict[str, Any] = self._call("POST", "/v1/jobs", body, headers=headers, idempotent=repeatable)
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

    def get_job(self, job_id: str) -> dict[str, Any]:
        job: dict[str, Any] = self._call("GET", f"/v1/jobs/{quote_segment(job_id)}")
        return job

    def update_job(self, job_id: str, patch: dict[str, Any], if_match: int | str) -> dict[str, Any]:
        """A JSON merge patch; `if_match` is the job's current version."""
        headers = {"if-match": etag(if_match), "content-type": "application/merge-patch+json"}
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
        headers = {"if-match": etag(if_match)} if if_match is not None else None
        job: dict[str, Any] = self._call(method, f"/v1/jobs/{quote_segment(job_id)}{suffix}", headers=headers)
        return job

    def trigger(self, job_id: str) -> dict[str, Any]:
        run: dict[str, Any] = self._call("POST", f"/v1/jobs/{quote_segment(job_id)}/trigger")
        return run

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

    def cancel_run(self, run_key: str) -> dict[str, Any]:
        run: dict[str, Any] = self._call("POST", f"/v1/runs/{quote_segment(run_key)}/cancel")
        return run

    def local_events(self, after: int, *, limit: int = 100) -> dict[str, Any]:
        """Local mode only: the caller's run and job events the bus received after position
        `after` ({"items": [CloudEvent, ...], "cursor": N}). A deployed stack answers 404."""
        page: dict[str, Any] = self._call("GET", "/local/events", query={"after": after, "limit": limit})
        return page
