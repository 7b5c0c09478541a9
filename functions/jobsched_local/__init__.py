"""Local mode: a moto server plus the AWS glue (API Gateway front, ticks, event sources).

Excluded from the Lambda asset; the handlers it calls are the same ones Lambda runs."""
