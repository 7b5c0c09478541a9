"""Header values referenced by ARN (`{"valueFrom": ...}`), read from Secrets Manager or SSM
Parameter Store with Powertools Parameters, cached for `max_age` seconds, and authorised per
tenant before every read (cached or not), so one tenant never reaches another's secret through
the cache. The check is the one every write of a target passes
(targets.authority.secret_refusal).

The value lives only in the worker's memory for the request: it is never stored, logged or
returned, and `scrub` removes it from whatever the receiver answers before that is recorded."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from aws_lambda_powertools.utilities.parameters import SecretsProvider, SSMProvider
from aws_lambda_powertools.utilities.parameters.exceptions import GetParameterError, TransformParameterError
from botocore.exceptions import ClientError

from ..domain.errors import PermanentError, RetryableError
from ..domain.grants import Grants
from ..domain.models import MAX_HEADER_VALUE_CHARS, HttpTarget, SecretRef, is_header_text
from .authority import header_field, secret_refusal

ClientFactory = Callable[[str], Any]

DEFAULT_MAX_AGE = 300  # seconds a secret's value is reused before it is read again
SHOWN_INSTEAD = "[secret]"  # what a receiver's echo of a secret becomes in a run's record
# The store answered that the secret is not there, not ours, or not decryptable: retrying the
# run cannot help until someone changes the secret, its policy or its key.
_PERMANENT_CODES = frozenset(
    {
        "ResourceNotFoundException",
        "ParameterNotFound",
        "ParameterVersionNotFound",
        "AccessDeniedException",
        "AccessDenied",
        "DecryptionFailure",
        "InvalidKeyId",
        "InvalidRequestException",
        "InvalidParameterException",
        "ValidationException",
        "KMSAccessDeniedException",
        "KMSDisabledException",
        "KMSInvalidStateException",
        "KMSNotFoundException",
    }
)


# --- reading -------------------------------------------------------------------------------


class SecretReader:
    """Reads the referenced header values of one delivery. `clients` builds boto3 clients (the
    process's factory: local mode points it at moto); a client is built on first use only.
    `grants` gives the operator's grants as they are now; it is called before every read, so
    a grant withdrawn since the job was written (or since the value was cached) stops the read."""

    def __init__(
        self, clients: ClientFactory, grants: Callable[[], Grants], *, max_age: int = DEFAULT_MAX_AGE
    ) -> None:
        self._clients = clients
        self._grants = grants
        self._max_age = max_age
        self._providers: dict[str, SecretsProvider | SSMProvider] = {}

    def _provider(self, store: str) -> SecretsProvider | SSMProvider:
        if store not in self._providers:
            client = self._clients("secretsmanager" if store == "secretsmanager" else "ssm")
            self._providers[store] = (
                SecretsProvider(boto3_client=client)
                if store == "secretsmanager"
                else SSMProvider(boto3_client=client)
            )
        return self._providers[store]

    def header_values(self, tenant: str, target: HttpTarget) -> dict[str, str]:
        """The header values the target references, by header name. Raises PermanentError
        (not granted, missing, unreadable, not a usable header value) or RetryableError
        (the store throttled or failed); no message ever carries a value."""
        return {name: self.value(tenant, name, ref) for name, ref in target.secret_headers.items()}

    def value(self, tenant: str, header: str, ref: SecretRef) -> str:
        refused = secret_refusal(self._grants(), tenant, ref.value_from, header_field(header))
        if refused is not None:
            raise refused.to_failure()
        where = f"the secret of header '{header}' ({ref.value_from})"
        provider = self._provider(ref.store)
        region = ref.value_from.split(":")[3]
        ours = getattr(getattr(provider.client, "meta", None), "region_name", None)
        if ours and region != ours:
            # The client would ask its own region's service, which answers "not found".
            raise PermanentError(
                f"{where} is in {region}; this worker reads secrets of {ours}",
                error_class="SecretUnavailable",
            )
        try:
            if isinstance(provider, SSMProvider):
                raw: Any = provider.get(ref.value_from, max_age=self._max_age, decrypt=True)
            else:
                if ref.json_key is not None:
                    raw = provider.get(ref.value_from, max_age=self._max_age, transform="json")
                else:
                    raw = provider.get(ref.value_from, max_age=self._max_age)
        except TransformParameterError:
            raise PermanentError(
                f"{where} is not a JSON object, so jsonKey cannot apply", error_class="BadSecret"
            ) from None
        except GetParameterError as exc:
            raise _read_error(where, exc) from None
        if ref.json_key is not None:
            raw = raw.get(ref.json_key) if isinstance(raw, dict) else None
            if raw is None:
                raise PermanentError(f"{where} has no string field '{ref.json_key}'", error_class="BadSecret")
        if not isinstance(raw, str):
            raise PermanentError(
                f"{where} is not text (binary secrets cannot be header values)", error_class="BadSecret"
            )
        value = (ref.prefix or "") + raw
        if not raw or len(value) > MAX_HEADER_VALUE_CHARS or not is_header_text(value):
            raise PermanentError(
                f"{where} cannot be a header value: it must be 1..{MAX_HEADER_VALUE_CHARS} characters "
                "of visible Latin-1 text (no CR, LF or other control characters)",
                error_class="BadSecret",
            )
        return value


def _read_error(where: str, exc: GetParameterError) -> PermanentError | RetryableError:
    cause = exc.__context__
    code = cause.response.get("Error", {}).get("Code", "") if isinstance(cause, ClientError) else ""
    if code in _PERMANENT_CODES:
        return PermanentError(f"{where} could not be read: {code}", error_class="SecretUnavailable")
    return RetryableError(
        f"{where} could not be read: {code or type(cause).__name__}", error_class="SecretUnavailable"
    )


# --- keeping values out of what is recorded ------------------------------------------------


def scrub(value: Any, secrets: Sequence[str]) -> Any:
    """`value` (a JSON value or text) with every occurrence of each secret replaced."""
    if not secrets:
        return value
    if isinstance(value, str):
        for secret in sorted(secrets, key=len, reverse=True):
            value = value.replace(secret, SHOWN_INSTEAD)
        return value
    if isinstance(value, list):
        return [scrub(item, secrets) for item in value]
    if isinstance(value, dict):
        return {scrub(k, secrets): scrub(v, secrets) for k, v in value.items()}
    return value
