"""A job's signing secrets: their form, what signs at an instant, and the rotation's overlap
and bound. Deliveries signed by the HTTP client verify with the `standardwebhooks` package."""

from __future__ import annotations

import base64
from datetime import UTC, datetime, timedelta

import pytest
from jobsched.domain.errors import LimitExceeded
from jobsched.domain.signing import MAX_SIGNING_SECRETS, SigningSecrets, new_signing_secret
from jobsched.targets.signing import signature_headers
from standardwebhooks.webhooks import Webhook

T = datetime(2026, 11, 2, 8, 0, tzinfo=UTC)


def test_a_secret_is_whsec_and_32_random_bytes():
    secrets = {new_signing_secret() for _ in range(100)}
    assert len(secrets) == 100
    for secret in secrets:
        assert secret.startswith("whsec_")
        assert len(base64.b64decode(secret.removeprefix("whsec_"))) == 32


def test_a_rotation_keeps_the_old_secret_signing_for_24_hours_exactly():
    first = SigningSecrets.first("j_1", "tenant-a", T)
    rotated = first.rotated(T + timedelta(hours=1))
    old, new = first.current, rotated.current
    assert old != new
    assert rotated.signing(T + timedelta(hours=1)) == [old, new]
    assert rotated.signing(T + timedelta(hours=25) - timedelta(seconds=1)) == [old, new]
    assert rotated.signing(T + timedelta(hours=25)) == [new]


def test_rotating_again_never_extends_a_retiring_secret_and_drops_retired_ones():
    a = SigningSecrets.first("j_1", "tenant-a", T)
    b = a.rotated(T)
    c = b.rotated(T + timedelta(hours=2))
    assert [s.retires_at for s in c.secrets] == [T + timedelta(hours=24), T + timedelta(hours=26), None]
    d = c.rotated(T + timedelta(hours=30))  # a and b have retired by now
    assert [s.secret for s in d.secrets[:-1]] == [c.current]


def test_at_most_five_secrets_sign_at_once():
    signing = SigningSecrets.first("j_1", "tenant-a", T)
    for hour in range(MAX_SIGNING_SECRETS - 1):
        signing = signing.rotated(T + timedelta(hours=hour))
    with pytest.raises(LimitExceeded, match="retires at 2026-11-03T08:00:00Z"):
        signing.rotated(T + timedelta(hours=5))
    assert len(signing.rotated(T + timedelta(hours=24)).secrets) == MAX_SIGNING_SECRETS


def test_signature_headers_verify_with_every_secret_and_only_with_those():
    now = datetime.now(UTC)
    one, two = new_signing_secret(), new_signing_secret()
    body = b'{"runKey":"j_1@2026-11-02T08:00:00Z"}'
    headers = signature_headers([one, two], "j_1@2026-11-02T08:00:00Z#1", now, body)
    assert set(headers) == {"webhook-id", "webhook-timestamp", "webhook-signature"}
    for secret in (one, two):
        assert Webhook(secret).verify(body, headers) == {"runKey": "j_1@2026-11-02T08:00:00Z"}
    with pytest.raises(Exception, match="No matching signature"):
        Webhook(new_signing_secret()).verify(body, headers)
    assert signature_headers([], "id", now, body) == {}
