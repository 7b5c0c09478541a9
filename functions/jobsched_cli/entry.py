"""The `jobsched` command: local mode, and a client for the HTTP API.

Exit codes: 0 ok, 1 the API answered with an error or with a body not of the documented shape
(or could not be reached), 2 usage."""

from __future__ import annotations

import os
import sys

from jobsched.client import ApiError, ApiUnreachable, SigningUnavailable, UnexpectedResponse
from pydantic import ValidationError

from .args import build_parser
from .commands import Context, cmd_doctor
from .rendering import format_api_error, refused_here
from .values import UsageError, attach_negative_values


def main(argv: list[str] | None = None) -> int:
    raw = sys.argv[1:] if argv is None else argv
    if raw[:1] == ["doctor"]:  # the deploy preflight parses its own options (infra.doctor)
        return cmd_doctor(raw[1:])
    parser = build_parser()
    try:
        args = parser.parse_args(attach_negative_values(raw))
    except SystemExit as exc:  # argparse: --help (0) or a usage error (2)
        return exc.code if isinstance(exc.code, int) else 2
    if getattr(args, "local", None):
        return int(args.local(args))
    try:
        ctx = Context(args)
        return int(args.handler(ctx, args))
    except BrokenPipeError:
        # The reader went away (`jobsched runs list J | head`): it has what it wanted.
        _discard_stdout()
        return 0
    except UsageError as exc:
        print(f"jobsched: error: {exc}", file=sys.stderr)
        return 2
    except SigningUnavailable as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except ApiError as exc:
        print(format_api_error(exc), file=sys.stderr)
        return 1
    except ValidationError as exc:
        # A body the client refused before sending it: reported as the API reports it.
        print(format_api_error(refused_here(exc)), file=sys.stderr)
        return 1
    except (ApiUnreachable, UnexpectedResponse) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130


def _discard_stdout() -> None:
    """Point stdout at /dev/null, so flushing it at exit does not report the pipe again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass
