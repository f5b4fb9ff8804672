"""The competing load of measured runs (`evaluation.busy`): busy processes run while the block
runs, stop after it, and stop by themselves when the run that started them is killed (an
orphan would load every later measurement)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from streamcap.evaluation.busy import busy_processes


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def gone_within(pid: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not alive(pid)


def test_busy_processes_stop_after_the_block_and_when_their_run_is_killed() -> None:
    with busy_processes(1) as pids:
        assert len(pids) == 1 and alive(pids[0])
    assert gone_within(pids[0], 5)
    code = (
        "from streamcap.evaluation.busy import busy_processes\nimport time\n"
        "with busy_processes(1) as p:\n    print(p[0], flush=True)\n    time.sleep(60)\n"
    )
    run = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert run.stdout is not None
    child = int(run.stdout.readline())
    os.kill(run.pid, signal.SIGKILL)  # killed from outside: no `finally` runs
    run.wait()
    try:
        assert gone_within(child, 10)
    finally:
        if alive(child):
            os.kill(child, signal.SIGKILL)
