"""Local mode's default API key and its tenant: the key the CLI sends to a loopback endpoint
when none is given. Kept apart from config so that the CLI's client commands can name the key
without importing local mode's runtime (settings, targets, boto3)."""

DEV_KEY = "jobsched-dev-key"
DEV_TENANT = "dev"
