"""jobsched.threads: work on daemon threads, waited for through Futures, never joined at
interpreter exit."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from jobsched.threads import map_on_daemons, start_daemon

FUNCTIONS = Path(__file__).resolve().parents[2] / "functions"


def test_start_daemon_runs_on_a_named_daemon_thread_and_hands_back_its_answer() -> None:
    seen: list[threading.Thread] = []

    def work() -> int:
        seen.append(threading.current_thread())
        return 42

    assert start_daemon(work, "effect").result(timeout=10) == 42
    (thread,) = seen
    assert thread.daemon and thread.name.startswith("effect-")
    assert thread is not threading.main_thread()


def test_start_daemon_hands_back_what_the_work_raised() -> None:
    def work() -> None:
        raise KeyboardInterrupt  # a BaseException too, as a ThreadPoolExecutor hands it back

    with pytest.raises(KeyboardInterrupt):
        start_daemon(work, "effect").result(timeout=10)


def test_map_on_daemons_runs_every_item_at_once_and_answers_in_order() -> None:
    barrier = threading.Barrier(3, timeout=10)  # only met when all three run at once

    def work(item: int) -> int:
        barrier.wait()
        time.sleep(0.01 * (3 - item))  # the last item finishes first
        return item * 10

    assert map_on_daemons(work, [1, 2, 3], "record") == [10, 20, 30]


def test_map_on_daemons_raises_the_first_failure_after_waiting_for_every_item() -> None:
    finished: list[int] = []

    def work(item: int) -> int:
        if item == 1:
            raise ValueError("one")
        time.sleep(0.05)
        finished.append(item)
        return item

    with pytest.raises(ValueError, match="one"):
        map_on_daemons(work, [1, 2], "record")
    assert finished == [2]


def test_an_interpreter_exits_with_work_still_running_on_a_daemon() -> None:
    """A ThreadPoolExecutor's worker would be joined at exit and hold the process for 600 s."""
    code = (
        f"import sys, time; sys.path[:0] = [{str(FUNCTIONS)!r}]\n"
        "from jobsched.threads import start_daemon\n"
        "future = start_daemon(lambda: time.sleep(600), 'effect')\n"
        "print('started', flush=True)\n"
    )
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout == "started\n", done.stderr
    assert time.monotonic() - started < 60
