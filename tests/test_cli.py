"""The command line, run as a user runs it: a real process, real exit codes."""

import subprocess
import sys

from somatize import Recorder, Store


def somatize(*args):
    return subprocess.run([sys.executable, "-m", "somatize.cli", *map(str, args)], capture_output=True, text=True)


def make(tmp_path):
    store = Store(tmp_path / "store")
    with Recorder(store, run="done", summarising=["loss"]) as r:
        for i in range(30):
            r.forward_began()
            r({"fact": "finished", "took_us": 10})
            r({"fact": "loss", "value": 0.5 / (i + 1)})
    live = Recorder(store, run="live")
    live.forward_began()
    live({"fact": "finished", "took_us": 1})
    live.flush()
    return store, live


def rows(output):
    lines = output.strip().splitlines()
    head = lines[0].split()
    return {cells[0]: dict(zip(head, cells)) for cells in (line.split() for line in lines[1:])}


def test_runs_lists_each_run_with_its_state_and_summary(tmp_path):
    store, live = make(tmp_path)
    done = somatize("runs", store.path)
    assert done.returncode == 0, done.stderr
    table = rows(done.stdout)
    assert set(table) == {"done", "live"}
    assert table["done"]["state"] == "finished" and table["done"]["forwards"] == "30"
    assert float(table["done"]["loss"]) == float(f"{0.5 / 30:.4g}")
    assert table["live"]["state"] == "running"  # held by this process
    live.close()
    assert rows(somatize("runs", store.path).stdout)["live"]["state"] == "finished"


def test_check_is_clean_on_a_sound_store(tmp_path):
    store, live = make(tmp_path)
    live.close()
    store.keep("w", {"a": 1})
    done = somatize("check", store.path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "clean" in done.stdout


def test_check_names_the_damaged_run_and_byte_and_exits_1(tmp_path):
    store, live = make(tmp_path)
    live.close()
    log = store.path / "runs" / "done" / "facts.log"
    with open(log, "r+b") as f:
        f.truncate(log.stat().st_size - 10)
    done = somatize("check", store.path)
    assert done.returncode == 1
    assert "'done'" in done.stdout and "byte 0" in done.stdout


def test_check_reports_a_damaged_object_too(tmp_path):
    store, live = make(tmp_path)
    live.close()
    digest = store.keep("w", {"a": 1})
    obj = store.path / "objects" / digest[7:9] / digest[9:]
    obj.chmod(0o644)
    obj.write_bytes(obj.read_bytes()[:-1] + b"!")
    done = somatize("check", store.path)
    assert done.returncode == 1 and digest[9:] in done.stdout


def test_usage_errors_exit_2(tmp_path):
    missing = somatize("runs", tmp_path / "nowhere")
    assert missing.returncode == 2 and "no such folder" in missing.stderr
    (tmp_path / "plain").mkdir()
    plain = somatize("check", tmp_path / "plain")
    assert plain.returncode == 2 and "not a somatize store" in plain.stderr
    assert somatize("frobnicate", tmp_path).returncode == 2
    assert somatize().returncode == 2
    assert not (tmp_path / "plain" / "SOMATIZE").exists()  # reading made no store


def test_an_empty_store_says_so(tmp_path):
    store = Store(tmp_path / "store")
    done = somatize("runs", store.path)
    assert done.returncode == 0 and "no runs" in done.stdout
