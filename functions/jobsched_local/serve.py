"""Runs local mode in the foreground until Ctrl-C."""

from __future__ import annotations

import signal
import sys
import threading
from types import FrameType

from jobsched.targets.registry import HandlerModuleError

from .config import LocalConfig
from .console import RunTable, quiet_console, startup_banner
from .runtime import LocalRuntime

MISSING_MODULE_HINT = (
    "  start local mode from the directory that holds it, or name that directory with --handlers-path"
)


def serve(
    *,
    port: int | None = None,
    moto_port: int | None = None,
    config_path: str | None = None,
    demo: bool = False,
    follow: str = "mine",
    handlers_path: list[str] | None = None,
    verbose: bool = False,
) -> int:
    """Local mode until Ctrl-C (or SIGTERM); returns the exit code. `follow` is whose runs the
    live table shows (console.FOLLOW_CHOICES: `mine`, the default, `all`, or `none`).
    `handlers_path`: directories searched for handler modules before the configured ones.
    `verbose`: the functions' Powertools JSON logs too (console.quiet_console).

    A handler module that cannot be imported is one error on stderr naming it and why (with a
    hint when it is not found) and exit code 2, before anything starts."""
    quiet_console(verbose=verbose)
    try:
        config = LocalConfig.load(config_path)
    except (OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if port is not None:
        config.port = port
    if moto_port is not None:
        config.moto_port = moto_port
    if handlers_path:
        config.handlers_path = [*handlers_path, *config.handlers_path]
    if demo:
        # Tighter ticks so the tour shows repairs and sweeps within a minute.
        config.sweep_seconds = min(config.sweep_seconds, 10)
        config.reconcile_seconds = min(config.reconcile_seconds, 10)
    try:
        runtime = LocalRuntime(config).start()
    except HandlerModuleError as exc:
        print(f"error: {exc}", file=sys.stderr)
        if exc.missing:
            print(MISSING_MODULE_HINT, file=sys.stderr)
        return 2
    except OSError as exc:
        print(
            f"error: could not start local mode: {exc} (is the port in use? try --port/--moto-port)",
            file=sys.stderr,
        )
        return 1

    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    print(startup_banner(runtime.api_url, runtime.moto.url if runtime.moto else "", config), flush=True)
    tour = None
    if demo:
        from .demo import Demo

        tour = Demo(runtime.api_url, runtime.api_key)
    table = None
    if follow != "none":
        tour_jobs = tour.jobs.keys() if tour is not None else frozenset()
        table = RunTable.of(runtime, follow=follow, tour_jobs=tour_jobs).start()
    try:
        if tour is not None:
            tour.run(stop)
        else:
            stop.wait()
    finally:
        print("\nstopping...", flush=True)
        if table is not None:
            table.stop()
        runtime.stop()
    return 0
