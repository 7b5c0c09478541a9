"""The `jobsched` command."""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="jobsched", description="Durable multi-tenant job scheduler")
    commands = parser.add_subparsers(dest="command", required=True)
    local = commands.add_parser("local", help="run the whole scheduler on this machine")
    local.add_argument("--demo", action="store_true")
    args = parser.parse_args(argv)
    if args.command == "local":
        print("jobsched local: not yet available (local mode is the next milestone)", file=sys.stderr)
        return 0
    return 2


if __name__ == "__main__":
    sys.exit(main())
