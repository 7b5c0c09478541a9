"""Who is calling: the tenant, taken only from the authenticated caller in the request
context (an authorizer's `tenantId`, or the IAM principal), never from the request."""

from __future__ import annotations

import re
from typing import Any

from aws_lambda_powertools.utilities.data_classes.api_gateway_proxy_event import APIGatewayProxyEvent
from aws_lambda_powertools.utilities.data_classes.common import BaseProxyEvent

from ...domain.errors import Unauthenticated
from ...observability import logger


def tenant_of(event: BaseProxyEvent) -> str:
    """The tenant: an authorizer's `tenantId` (local mode, custom authorizers) or the IAM principal."""
    if not isinstance(event, APIGatewayProxyEvent):  # only API Gateway's REST events carry a caller
        raise Unauthenticated("the request carries no authenticated caller")
    context = event.request_context
    authorizer = context.authorizer.raw_event if context.authorizer else {}
    tenant = authorizer.get("tenantId")
    if tenant:
        return authorizer_tenant(tenant)
    arn = context.identity.user_arn
    if arn:
        return principal_tenant(arn)
    raise Unauthenticated("the request carries no authenticated caller")


# Tenant ids made from IAM principals are `<account>/<kind>/...` or `<account>/root`; an
# authorizer's tenantId may be anything else, and never starts with 12 digits and a slash,
# so the two cannot collide.
_IAM_TENANT = re.compile(r"[0-9]{12}/")
_PRINCIPAL = re.compile(
    r"arn:aws[a-z-]*:(?:"
    r"iam::(?P<user_account>[0-9]{12}):user/(?P<user>[\w+=,.@/-]{1,576})"
    r"|sts::(?P<role_account>[0-9]{12}):assumed-role/(?P<role>[\w+=,.@-]{1,64})/[\w+=,.@-]{2,64}"
    r"|sts::(?P<fed_account>[0-9]{12}):federated-user/(?P<fed>[\w+=,.@-]{2,64})"
    r"|iam::(?P<root_account>[0-9]{12}):root"
    r")",
    re.ASCII,
)


def principal_tenant(arn: str) -> str:
    """The tenant of an IAM principal, kind and path included, so no two principals share one:

    `arn:aws:iam::123:user/deploy/ci` → `123/user/deploy/ci`; `arn:aws:sts::123:assumed-role/ci/s1`
    → `123/role/ci` (every session of a role is the role); `arn:aws:sts::123:federated-user/ci`
    → `123/federated-user/ci`; `arn:aws:iam::123:root` → `123/root`."""
    match = _PRINCIPAL.fullmatch(arn)
    if match is None:
        raise Unauthenticated(
            "the caller's IAM principal is not a user, role session, federated user or root"
        )
    found = {k: v for k, v in match.groupdict().items() if v is not None}
    if "user" in found:
        return f"{found['user_account']}/user/{found['user']}"
    if "role" in found:
        return f"{found['role_account']}/role/{found['role']}"
    if "fed" in found:
        return f"{found['fed_account']}/federated-user/{found['fed']}"
    return f"{found['root_account']}/root"


def authorizer_tenant(tenant: Any) -> str:
    """An authorizer's tenantId, as it is, unless it could be mistaken for an IAM principal's."""
    text = str(tenant)
    if _IAM_TENANT.match(text) or len(text) > 256 or not text.isprintable():
        logger.warning("authorizer tenantId refused", extra={"tenant_id": ascii(text[:64])})
        raise Unauthenticated(
            "the authorizer's tenantId must be 1-256 printable characters and not start with "
            "12 digits and '/' (the form of tenant ids made from IAM principals)"
        )
    return text
