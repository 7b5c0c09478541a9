"""Runs local mode in the foreground until Ctrl-C."""

from __future__ import annotations

import signal
import sys
import threading
from types import FrameType

from .config import LocalConfig
from .console import RunTable, quiet_console, startup_banner
from .runtime import LocalRuntime


def serve(
    *,
    port: int | None = None,
    moto_port: int | None = None,
    config_path: str | None = None,
    demo: bool = False,
) -> int:
    quiet_console()
    try:
        config = LocalConfig.load(config_path)
    except (OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if port is not None:
        config.port = port
    if moto_port is not None:
        config.moto_port = moto_port
    if demo:
        # Tighter ticks so the tour shows repairs and sweeps within a minute.
        config.sweep_seconds = min(config.sweep_seconds, 10)
        config.reconcile_seconds = min(config.reconcile_seconds, 10)
    try:
        runtime = LocalRuntime(config).start()
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
    table = RunTable.of(runtime).start()
    try:
        if demo:
            from .demo import Demo

            Demo(runtime.api_url, runtime.api_key).run(stop)
        else:
            stop.wait()
    finally:
        print("\nstopping...", flush=True)
        table.stop()
        runtime.stop()
    return 0
