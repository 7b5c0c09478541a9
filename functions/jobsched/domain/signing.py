"""A job's webhook signing secrets and their rotation (Standard Webhooks, `whsec_` secrets).

Each job has its own secrets, kept apart from the job (the API never returns them after the
answer that made them). A rotation adds a new secret and retires the ones before it after
an overlap, during which every delivery carries one signature per secret, as the
specification allows, so a receiver can switch to the new secret at its own pace."""

from __future__ import annotations

import base64
import secrets
from datetime import datetime, timedelta

from pydantic import BaseModel, ConfigDict, Field

from .errors import LimitExceeded
from .instants import Instant, format_instant
from .models import ForwardCompatible

SECRET_PREFIX = "whsec_"
SECRET_BYTES = 32  # the specification asks for 24 to 64 random bytes
ROTATION_OVERLAP = timedelta(hours=24)  # how long a replaced secret keeps signing
# Secrets signing at once (the newest and those still in their overlap): bounds the signature
# header, and a loop of rotations, at one rotation every few hours on average.
MAX_SIGNING_SECRETS = 5


def new_signing_secret() -> str:
    """`whsec_` + base64 of 32 random bytes: the form the `standardwebhooks` package reads."""
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(SECRET_BYTES)).decode("ascii")


class SigningSecret(ForwardCompatible):
    """One secret as stored in its job's signing item (read back with context TOLERANT)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    secret: str = Field(pattern=r"^whsec_[A-Za-z0-9+/]+={0,2}$")
    created_at: Instant
    retires_at: Instant | None = None  # None: the current secret

    def signs_at(self, now: datetime) -> bool:
        return self.retires_at is None or now < self.retires_at


class SigningSecrets(BaseModel):
    """The secrets of one job, oldest first; the last is the current one."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    job_id: str
    tenant: str
    secrets: tuple[SigningSecret, ...] = ()
    rev: int = 0  # every write is conditioned on it

    @classmethod
    def first(cls, job_id: str, tenant: str, now: datetime) -> SigningSecrets:
        return cls(
            job_id=job_id,
            tenant=tenant,
            secrets=(SigningSecret(secret=new_signing_secret(), created_at=now),),
        )

    @property
    def current(self) -> str | None:
        return self.secrets[-1].secret if self.secrets else None

    def signing(self, now: datetime) -> list[str]:
        """The secrets a delivery at `now` is signed with: the current one and those in overlap."""
        return [s.secret for s in self.secrets if s.signs_at(now)]

    def rotated(self, now: datetime, overlap: timedelta = ROTATION_OVERLAP) -> SigningSecrets:
        """A new current secret; the others sign until `now + overlap` (or sooner, if they
        were already retiring), and those retired are dropped. Raises LimitExceeded when
        MAX_SIGNING_SECRETS would sign at once."""
        retiring = now + overlap
        kept = tuple(
            s.model_copy(update={"retires_at": min(s.retires_at or retiring, retiring)})
            for s in self.secrets
            if s.signs_at(now)
        )
        if len(kept) >= MAX_SIGNING_SECRETS:
            soonest = min(s.retires_at for s in kept if s.retires_at is not None)
            raise LimitExceeded(
                f"{len(kept)} signing secrets already sign this job's deliveries (at most "
                f"{MAX_SIGNING_SECRETS}); the oldest retires at {format_instant(soonest)}",
                limit=MAX_SIGNING_SECRETS,
            )
        fresh = SigningSecret(secret=new_signing_secret(), created_at=now)
        return self.model_copy(update={"secrets": (*kept, fresh)})
