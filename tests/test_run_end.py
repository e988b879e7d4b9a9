"""How a run ends is told truly: only its owner's close() (or a with block
left normally) makes it finished; a run its owner did not close lists as
interrupted, with the cause the process could tell. Each script runs in a
real process of its own."""

import os
import signal
import subprocess
import sys

import pytest

from somatize import Recorder
from somatize._base.errors import SomatizeValueError
from somatize.record import curve, runs
from somatize.record._summary import CAUSE_LIMIT, EXITED, LOST

HEAD = """
import os, signal, sys
from somatize import Recorder
r = Recorder(sys.argv[1], run="r", summarising=["loss"])
r.forward_began(); r({"fact": "loss", "value": 0.5})
"""


def ended(tmp_path, tail, returncode):
    """Run HEAD + tail in a process of its own; the run's row of runs()."""
    path = tmp_path / "store"
    done = subprocess.run([sys.executable, "-c", HEAD + tail, str(path)], capture_output=True, text=True)
    assert done.returncode == returncode, done.stderr
    assert list(curve(path, "r", "loss")) == [0.5]  # the loss before the end is kept either way
    return runs(path).set_index("run").loc["r"]


def test_a_script_that_raises_leaves_its_run_interrupted_naming_the_exception(tmp_path):
    row = ended(tmp_path, "1 / 0\n", 1)
    assert (row["state"], row["cause"]) == ("interrupted", "ZeroDivisionError: division by zero")


def test_a_script_that_exits_without_close_leaves_its_run_interrupted(tmp_path):
    row = ended(tmp_path, "", 0)
    assert (row["state"], row["cause"]) == ("interrupted", EXITED)


def test_a_script_stopped_by_sigint_says_so(tmp_path):
    # Python's own handler for SIGINT raises KeyboardInterrupt where the script stands
    row = ended(tmp_path, "os.kill(os.getpid(), signal.SIGINT)\nimport time; time.sleep(30)\n", -signal.SIGINT)
    assert (row["state"], row["cause"]) == ("interrupted", "KeyboardInterrupt (ctrl-C or SIGINT)")


def test_a_script_killed_outright_reads_interrupted_by_a_lost_process(tmp_path):
    row = ended(tmp_path, "r.flush(); os.kill(os.getpid(), signal.SIGKILL)\n", -signal.SIGKILL)
    assert (row["state"], row["cause"]) == ("interrupted", LOST)


def test_a_script_that_closes_its_run_leaves_it_finished_with_no_cause(tmp_path):
    row = ended(tmp_path, "r.close()\n1 / 0\n", 1)
    assert row["state"] == "finished" and "cause" not in row


def test_an_error_from_before_the_run_began_is_not_its_cause(tmp_path):
    # IPython keeps a cell's error as sys.last_value, as the interpreter does;
    # one that happened before the Recorder was made did not end its run
    tail = "\n".join(["sys.last_value = ValueError('an earlier cell')",
                      "r2 = Recorder(sys.argv[1], run='r2')", "r2.forward_began(); r2({'fact': 'updated'})", ""])
    ended(tmp_path, "", 0)  # makes the store
    path = tmp_path / "store"
    code = HEAD.replace('run="r"', 'run="r1"') + tail
    subprocess.run([sys.executable, "-c", code, str(path)], check=True)
    table = runs(path).set_index("run")
    assert table.loc["r2", "cause"] == EXITED and table.loc["r1", "cause"] == "ValueError: an earlier cell"


def test_a_with_block_left_by_an_exception_names_it(tmp_path):
    path = tmp_path / "store"
    with pytest.raises(KeyError):
        with Recorder(path, run="r") as r:
            r({"fact": "updated"})
            raise KeyError("x" * 1000)
    cause = runs(path).set_index("run").loc["r", "cause"]
    assert cause.startswith("KeyError: 'xxx") and len(cause) == CAUSE_LIMIT and cause.endswith("…")


def test_a_resumed_run_forgets_why_it_was_interrupted(tmp_path):
    ended(tmp_path, "1 / 0\n", 1)
    path = tmp_path / "store"
    with Recorder(path, run="r", resume=True):
        assert "cause" not in runs(path).columns  # running again
    table = runs(path)
    assert list(table["state"]) == ["finished"] and "cause" not in table.columns


def test_close_marks_a_run_finished_or_interrupted_and_nothing_else(tmp_path):
    r = Recorder(tmp_path / "store", run="r")
    with pytest.raises(SomatizeValueError, match="recorder.close()"):
        r.close("failed")
    r.close("interrupted")
    row = runs(tmp_path / "store").iloc[0]
    assert row["state"] == "interrupted" and os.path.isdir(tmp_path / "store" / "runs" / "r")


# ctrl-C inside a flush: a real SIGINT sent to this process from inside the
# commit (Python's handler raises KeyboardInterrupt at the next line), or the
# KeyboardInterrupt raised right there, at each stage of the commit
def _log_written(real):  # facts.log's append done, nothing after it
    calls = []

    def hook(fd, parts):
        real(fd, parts)
        calls.append(fd)
        if len(calls) == 1:
            raise KeyboardInterrupt
    return hook


def _signalled_before_sync(real):  # every file written, none synced, the summary not renamed
    calls = []

    def hook(fds, together=True):
        calls.append(1)
        if len(calls) == 1:
            os.kill(os.getpid(), signal.SIGINT)
        return real(fds, together)
    return hook


def _after_rename(real):  # the commit's summary renamed in: the commit stands
    calls = []

    def hook(self, written=None, together=True, durable=True):
        real(self, written, together, durable)
        if written is not None:
            calls.append(1)
            if len(calls) == 1:
                raise KeyboardInterrupt
    return hook


STAGES = {
    "log written": ("somatize._base.files.write_all", _log_written),
    "SIGINT before the sync": ("somatize._base.files.sync_all", _signalled_before_sync),
    "summary renamed": ("somatize.record._recorder.Recorder._write_summary", _after_rename),
}


@pytest.mark.parametrize("stage", STAGES)
def test_ctrl_c_inside_a_flush_damages_nothing_and_the_run_closes_interrupted(tmp_path, monkeypatch, stage):
    from somatize.record._check import check_run

    path = tmp_path / "store"
    where, hook = STAGES[stage]
    module, name = where.rsplit(".", 1)
    owner = (Recorder if module.endswith("Recorder") else sys.modules[module])
    with pytest.raises(KeyboardInterrupt):
        with Recorder(path, run="r") as rec:
            for i in range(3):
                rec.forward_began()
                rec({"fact": "loss", "value": float(i)})
            rec.flush()
            for i in range(3, 6):
                rec.forward_began()
                rec({"fact": "loss", "value": float(i)})
            monkeypatch.setattr(owner, name, hook(getattr(owner, name)))
            rec.flush()  # ctrl-C lands in here
            pytest.fail("the KeyboardInterrupt did not pass through flush()")
    monkeypatch.undo()
    row = runs(path).set_index("run").loc["r"]
    assert (row["state"], row["cause"]) == ("interrupted", "KeyboardInterrupt (ctrl-C or SIGINT)")
    assert list(curve(path, "r", "loss")) == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]  # none lost, none twice
    assert row["forwards"] == 6
    assert check_run(path / "runs" / "r") == ([], [])
    with Recorder(path, run="r", resume=True) as rec:
        rec.forward_began()
        rec({"fact": "loss", "value": 6.0})
    assert list(curve(path, "r", "loss")) == [float(i) for i in range(7)]
    assert runs(path).set_index("run").loc["r", "state"] == "finished"
    assert check_run(path / "runs" / "r") == ([], [])


def test_ctrl_c_inside_close_leaves_the_run_open_and_the_exit_marks_it_interrupted(tmp_path):
    tail = "\n".join([
        "from somatize._base import files",
        "real = files.write_all",
        "def hook(fd, parts):",
        "    real(fd, parts)",
        "    raise KeyboardInterrupt",
        "files.write_all = hook",
        "r.forward_began(); r({'fact': 'loss', 'value': 0.25})",
        "try:",
        "    r.close()",
        "except KeyboardInterrupt:",
        "    print('close passed the KeyboardInterrupt on; open:', repr(r))",
        "files.write_all = real",
        "raise KeyboardInterrupt",
        ""])
    path = tmp_path / "store"
    done = subprocess.run([sys.executable, "-c", HEAD + tail, str(path)], capture_output=True, text=True)
    assert done.returncode == -signal.SIGINT, done.stderr
    said = done.stdout.strip()  # the Recorder is neither closed nor stopped by a failed flush
    assert said.startswith("close passed the KeyboardInterrupt on; open: Recorder(run='r'")
    assert "closed" not in said and "stopped" not in said
    row = runs(path).set_index("run").loc["r"]
    assert (row["state"], row["cause"]) == ("interrupted", "KeyboardInterrupt (ctrl-C or SIGINT)")
    assert list(curve(path, "r", "loss")) == [0.5, 0.25]
