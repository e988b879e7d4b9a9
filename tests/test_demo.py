"""The main job's demo runs (``scripts/demo``): each state the run browser
shows is there once the demo has recorded them. JupyterLab itself is not
started here; the running run's child process is stopped by the test."""

import time

from somatize.demo import demo_runs
from somatize.record._runs import summaries

GUARD_S = 120  # a guard against a hang, not a measurement


def test_the_demo_records_finished_running_interrupted_and_damaged_runs(tmp_path):
    store = tmp_path / "notebooks" / "demo-store"
    running = demo_runs(store, running_for=GUARD_S)
    try:
        states = {}
        deadline = time.monotonic() + GUARD_S
        while "demo-running" not in states and time.monotonic() < deadline:  # its child starts recording
            states = {s["run"]: s["state"] for s in summaries(store)}
            time.sleep(0.05)
    finally:
        running.terminate()
        running.wait(60)
    assert states == {"demo-smooth": "finished", "demo-noisy": "finished", "demo-damaged": "damaged",
                      "demo-interrupted": "interrupted", "demo-running": "running"}
    after = {s["run"]: s["state"] for s in summaries(store)}
    assert after["demo-running"] == "interrupted"  # stopped by the test: nobody holds its lock now
