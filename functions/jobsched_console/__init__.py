"""The run console: a browser UI for the jobsched API, served as static files.

Not part of the Lambda asset. Local mode serves it at /console on the API port; `jobsched
console` serves it on 127.0.0.1 and forwards its API calls to a deployed stack, signed
(`proxy.py`). The page calls the same HTTP API as curl does."""

from .assets import CONSOLE_PATH, SECURITY_HEADERS, StaticResponse, console_response, is_console_path

__all__ = ["CONSOLE_PATH", "SECURITY_HEADERS", "StaticResponse", "console_response", "is_console_path"]
