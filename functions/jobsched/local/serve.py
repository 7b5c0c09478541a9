"""Runs local mode in the foreground until Ctrl-C."""

from __future__ import annotations

import logging
import signal
import sys
import threading
from types import FrameType

from .config import LocalConfig
from .runtime import LocalRuntime


def serve(
    *,
    port: int | None = None,
    moto_port: int | None = None,
    config_path: str | None = None,
    demo: bool = False,
) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(name)s %(message)s")
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
    print(f"jobsched local is running\n  API      {runtime.api_url}  (docs: jobsched docs --open)")
    print(f"  API key  {runtime.api_key}   (send it as the x-api-key header)")
    print(f"  AWS      {runtime.moto.url if runtime.moto else ''}  (moto: tables, stream, queues)")
    print("  state is in memory: stopping local mode discards every job and run")
    print("Ctrl-C stops.\n", flush=True)
    try:
        if demo:
            from .demo import Demo

            Demo(runtime.api_url, runtime.api_key).run(stop)
        else:
            stop.wait()
    finally:
        print("\nstopping...", flush=True)
        runtime.stop()
    return 0
