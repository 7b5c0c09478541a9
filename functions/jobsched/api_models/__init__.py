"""The HTTP API's shapes, shared by the server (`jobsched.handlers.api`) and the client
(`jobsched.client`): `requests` (what callers send), `views` (what the API answers),
`problems` (validation errors as the API names fields) and `base` (what every shape shares).

Light to import: pydantic and the domain models only; no Powertools, no boto3, no settings."""
