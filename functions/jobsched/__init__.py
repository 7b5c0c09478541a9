"""jobsched: a durable, multi-tenant job scheduler for AWS."""

__version__ = "0.1.0"
