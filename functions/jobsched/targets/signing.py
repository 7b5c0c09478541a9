"""Signs HTTP deliveries following the Standard Webhooks specification, with its reference
package (`standardwebhooks`), so a receiver verifies them with that same package.

Headers: `webhook-id` (the run key and the attempt), `webhook-timestamp` (Unix seconds of the
scheduler's clock), `webhook-signature` (`v1,<base64 HMAC-SHA256>` per secret signing at that
instant, space-separated: during a rotation both the new and the old secret sign)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from datetime import datetime

from standardwebhooks.webhooks import Webhook

from ..domain.errors import PermanentError
from ..domain.instants import Clock
from ..domain.signing import SigningSecrets
from .invocation import Invocation

WEBHOOK_HEADERS = frozenset({"webhook-id", "webhook-timestamp", "webhook-signature"})

SecretsOf = Callable[[str], SigningSecrets | None]  # job id -> its signing secrets, if it has any


def webhook_id(invocation: Invocation) -> str:
    """`<run key>#<attempt>`: unique per delivery attempt; the run key alone (for recognising
    a repeated effect) is the `Idempotency-Key` header."""
    return f"{invocation.run_key}#{invocation.attempt}"


def signature_headers(secrets: Sequence[str], message_id: str, at: datetime, body: bytes) -> dict[str, str]:
    """The three webhook-* headers for `body` sent at `at`, one signature per secret; none
    without secrets (a job created before jobs had them)."""
    if not secrets:
        return {}
    content = body.decode("utf-8")
    signatures = " ".join(Webhook(secret).sign(message_id, at, content) for secret in secrets)
    return {
        "webhook-id": message_id,
        "webhook-timestamp": str(math.floor(at.timestamp())),  # what Webhook.sign signs
        "webhook-signature": signatures,
    }


class DeliverySigner:
    """Looks up a job's signing secrets and signs each request of a delivery with them."""

    def __init__(self, secrets_of: SecretsOf, clock: Clock) -> None:
        self._secrets_of = secrets_of
        self._clock = clock

    def secrets_for(self, invocation: Invocation) -> list[str]:
        """The secrets signing at this instant (read once per delivery, before its first
        request). Raises PermanentError if the secrets belong to another tenant's job."""
        found = self._secrets_of(invocation.job_id)
        if found is None:
            return []
        if found.tenant != invocation.tenant:  # job ids are unique; never sign with another's
            raise PermanentError("the job's signing secrets belong to another tenant", error_class="Signing")
        return found.signing(self._clock.now())

    def headers(self, secrets: Sequence[str], invocation: Invocation, body: bytes | None) -> dict[str, str]:
        return signature_headers(secrets, webhook_id(invocation), self._clock.now(), body or b"")
