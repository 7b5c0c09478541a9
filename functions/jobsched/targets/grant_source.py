"""Where the functions read the operator's grants from.

The stack keeps them in one SSM parameter (its name in TARGET_GRANTS_PARAMETER), not in the
environment: Lambda allows 4 KB of variables per function, and a grants map outgrows that
with a few dozen tenants. The parameter is written by the deploy, with the stack's own
partition, region and account resolved into it, and read with Powertools Parameters,
cached for `MAX_AGE_SECONDS`: a grant revoked by a deploy stops being honoured within that
time by every warm function. Local mode and tests give the grants in the settings
(TARGET_GRANTS) instead.

A parameter that cannot be read or does not parse grants nothing: the caller gets
StorageUnavailable (a 503 at the API, a retried run in the worker), never a silent allow."""

from __future__ import annotations

import threading
from typing import Any

from aws_lambda_powertools.utilities.parameters import SSMProvider
from pydantic import ValidationError

from ..domain.errors import StorageUnavailable
from ..domain.grants import Grants, GrantsDocument, OwnNames
from ..observability import logger

MAX_AGE_SECONDS = 60


class ParameterGrants:
    """Callable: the grants in SSM parameter `name`, as of at most `max_age` seconds ago.
    `own`: the scheduler's own names, refused whatever the grants say; by default this
    parameter's stack's (`/<stack>/…` and the rest of OwnNames' `<stack>` names)."""

    def __init__(
        self, name: str, ssm_client: Any, *, max_age: int = MAX_AGE_SECONDS, own: OwnNames | None = None
    ) -> None:
        self._name = name
        self._provider = SSMProvider(boto3_client=ssm_client)
        self._max_age = max_age
        self._lock = threading.Lock()
        self._parsed: tuple[str, Grants] | None = None
        self._own = own if own is not None else OwnNames.beside(name)

    def __call__(self) -> Grants:
        try:
            raw = self._provider.get(self._name, max_age=self._max_age)
        except Exception as exc:
            logger.error("target grants unreadable", extra={"parameter": self._name, "error": str(exc)})
            raise StorageUnavailable(f"the target grants ({self._name}) cannot be read; retry") from exc
        text = raw if isinstance(raw, str) else str(raw)
        with self._lock:
            if self._parsed is not None and self._parsed[0] == text:
                return self._parsed[1]
            try:
                grants = Grants(GrantsDocument.model_validate_json(text), self._own)
            except ValidationError as exc:
                logger.error("target grants invalid", extra={"parameter": self._name, "error": str(exc)})
                raise StorageUnavailable(f"the target grants ({self._name}) are invalid") from exc
            self._parsed = (text, grants)
            return grants
