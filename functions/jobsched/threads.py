"""Work on daemon threads, waited for through Futures: what the worker runs (a batch's
records, each run's effect) holds nothing up at interpreter exit.

A ThreadPoolExecutor's threads are joined when the interpreter exits (concurrent.futures
registers that join, daemon threads or not), so a process told to stop (Ctrl-C in local mode)
with an effect still running would stay alive until the effect ended. How long the work may
run is decided by whoever waits on its Future: a Lambda invocation still waits for every
record and outlasts an effect to its deadline (services.attempt), exactly as before."""

from __future__ import annotations

import functools
import itertools
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import Future, wait
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")

_NUMBERS = itertools.count(1)  # thread names: <prefix>-1, <prefix>-2, ...


def start_daemon(work: Callable[[], R], name: str) -> Future[R]:
    """Run `work` on a new daemon thread named `<name>-<n>`; its Future holds what it returns
    or raises (a BaseException too, as a ThreadPoolExecutor's does)."""
    future: Future[R] = Future()

    def run() -> None:
        if not future.set_running_or_notify_cancel():
            return
        try:
            answer = work()
        except BaseException as exc:
            future.set_exception(exc)
        else:
            future.set_result(answer)

    threading.Thread(target=run, name=f"{name}-{next(_NUMBERS)}", daemon=True).start()
    return future


def map_on_daemons(work: Callable[[T], R], items: Iterable[T], name: str) -> list[R]:
    """`work` of every item at once, one daemon thread each (`start_daemon`), waited for in
    full: their answers in the order of `items`, or what the first of them (in that order)
    raised, as ThreadPoolExecutor.map gives them."""
    futures = [start_daemon(functools.partial(work, item), name) for item in items]
    wait(futures)  # every one, even after one raised
    return [future.result() for future in futures]


__all__ = ["map_on_daemons", "start_daemon"]
