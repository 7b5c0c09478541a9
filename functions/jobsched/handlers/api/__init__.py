"""`api` Lambda: the HTTP API behind API Gateway (REST, IAM auth), on the Powertools resolver.

One module per concern: `app` (the resolver, its error handling and the entry point),
`identity` (who the tenant is), `jobs`, `runs` and `leases` (the routes), `requests` and
`views` (the shapes in and out), `json_body` (strict decoding) and `problems` (validation
errors as the API names them). Routes only translate: HTTP in, one service call, HTTP out.
The Lambda entry point is `jobsched.handlers.api.handler`."""

from .app import app, handler
from .identity import authorizer_tenant, principal_tenant

__all__ = ["app", "authorizer_tenant", "handler", "principal_tenant"]
