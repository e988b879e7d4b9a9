"""TensorBoard's event files brought into a store (issue 32 item 5): written
by torch's own ``SummaryWriter``, imported by ``somatize import tensorboard``
(a real process) and ``somatize.import_tensorboard``, read back through the
record. The oracle is what was written: each value (as the float32 an event
keeps) at its step, the wall times given to the writer, the hparams."""

import os
import shutil
import struct
import subprocess
import sys

import numpy as np
import pytest
from torch.utils.tensorboard import SummaryWriter

import somatize
from somatize import Recorder, Store
from somatize._import import tensorboard as tb
from somatize.record import curve, progress, runs

from pictures import SVG, parse
from pictures import curve as read_curve

T0 = 1_700_000_000.0  # the wall time of step 0 given to the writer; a step is 0.25 s


def wall(step):
    return T0 + 0.25 * step


def f32(x):
    return float(np.float32(x))


# What each folder of the logdir holds: {folder: {tag: {step: value}}}
LOSS = {s: 1.0 / (s + 1) for s in range(60)}
ACC = {s: 0.5 + s / 200 for s in range(0, 60, 10)}
SPARSE = {s: 2.0 - s / 100 for s in range(1, 100, 5)}  # a loop counting from 1, every 5th
HPARAMS = {"lr": 0.1, "opt": "adam", "layers": 3}


def write_logdir(logdir):
    """The logdir: nested runs, hparams, a renamed tag, a tensor scalar,
    steps out of order and again, a histogram."""
    with SummaryWriter(logdir / "exp1" / "lr0.1") as w:
        for s, v in LOSS.items():
            w.add_scalar("train/loss", v, s, walltime=wall(s))
            if s in ACC:
                w.add_scalar("val/acc", ACC[s], s, walltime=wall(s) + 0.1)
        w.add_hparams(HPARAMS, {"hp/metric": 0.75}, run_name=".")
    with SummaryWriter(logdir / "exp1" / "lr0.01") as w:
        for s, v in SPARSE.items():
            w.add_scalar("train/loss", v, s, walltime=wall(s))
    with SummaryWriter(logdir / "exp2") as w:
        w.add_scalar("grad_norm", 3.0, 0, walltime=wall(0))  # the Trainer's own name: renamed
        w.add_scalar("my loss", 1.5, 0, walltime=wall(0))  # not a fact's name: renamed
        w.add_scalar("new", 0.125, 0, walltime=wall(0), new_style=True)  # a tensor of the scalars plugin
        w.add_scalar("late", 9.0, 5, walltime=wall(5))
        w.add_scalar("late", 7.0, 2, walltime=wall(6))  # a step back
        w.add_scalar("late", 8.0, 5, walltime=wall(7))  # step 5 again: the last is kept
        w.add_histogram("weights", np.arange(10.0), 0, walltime=wall(0))


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    logdir = tmp_path_factory.mktemp("tb") / "logs"
    write_logdir(logdir)
    return logdir


@pytest.fixture
def logdir(written, tmp_path):
    copy = tmp_path / "logs"
    shutil.copytree(written, copy)
    return copy


def somatize_cli(*args):
    return subprocess.run([sys.executable, "-m", "somatize.cli", *map(str, args)], capture_output=True,
                          text=True, timeout=300)


def by_step(store, run, name):
    """A curve as {step: value}, the steps as the run says them (its ``step`` fact, else the forward)."""
    c = curve(store, run, name)
    try:
        steps = curve(store, run, "step")
    except somatize.SomatizeKeyError:
        steps = None
    step_of = (lambda f: f) if steps is None else (lambda f: int(steps.get(f, f)))
    return {step_of(int(f)): v for f, v in c.items()}


def events_of(folder):
    return sorted(p for p in os.listdir(folder) if "tfevents" in p)


def test_the_command_imports_each_folder_as_a_finished_run(logdir, tmp_path):
    store = tmp_path / "store"
    done = somatize_cli("import", "tensorboard", logdir, store)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert lines[:3] == [
        "imported  exp1/lr0.01 -> run exp1-lr0.01: 20 steps, 20 points",
        "imported  exp1/lr0.1 -> run exp1-lr0.1: 60 steps, 67 points; config: 3 hparams",
        "imported  exp2 -> run exp2: 3 steps, 5 points; renamed: 'grad_norm' as 'tb_grad_norm', 'my loss' as "
        "'my_loss'; 1 point written again at a step already written: the last kept; not imported: histograms (1)",
    ]
    assert lines[3] == f"3 folders of event files: 3 imported; 92 points on 83 steps imported into {store}"
    table = runs(store).set_index("run")
    assert sorted(table.index) == ["exp1-lr0.01", "exp1-lr0.1", "exp2"]
    assert set(table["state"]) == {"finished"}
    assert table.loc["exp1-lr0.1", "config.tensorboard.folder"] == "exp1/lr0.1"
    assert table.loc["exp1-lr0.1", "train/loss.last"] == f32(LOSS[59])

    assert by_step(store, "exp1-lr0.1", "train/loss") == {s: f32(v) for s, v in LOSS.items()}
    assert by_step(store, "exp1-lr0.1", "val/acc") == {s: f32(v) for s, v in ACC.items()}
    assert by_step(store, "exp1-lr0.1", "hp/metric") == {0: 0.75}
    assert by_step(store, "exp1-lr0.01", "train/loss") == {s: f32(v) for s, v in SPARSE.items()}
    assert list(curve(store, "exp1-lr0.01", "step")) == list(SPARSE)  # steps kept, as log() keeps them
    assert by_step(store, "exp2", "tb_grad_norm") == {0: 3.0}
    assert by_step(store, "exp2", "my_loss") == {0: 1.5}
    assert by_step(store, "exp2", "new") == {0: 0.125}
    assert by_step(store, "exp2", "late") == {2: 7.0, 5: 8.0}


def test_the_config_holds_the_hparams_and_where_the_run_came_from(logdir, tmp_path):
    got = somatize.import_tensorboard(logdir, tmp_path / "store")
    assert [(o.folder, o.run, o.outcome) for o in got] == [
        ("exp1/lr0.01", "exp1-lr0.01", "imported"), ("exp1/lr0.1", "exp1-lr0.1", "imported"),
        ("exp2", "exp2", "imported")]
    from somatize.record._runs import load_summary

    config = load_summary(tmp_path / "store" / "runs" / "exp1-lr0.1")["config"]
    source = config.pop("tensorboard")
    assert config == HPARAMS  # torch writes numbers as doubles: 3 reads back as 3.0, equal
    folder = logdir / "exp1" / "lr0.1"
    assert source["folder"] == "exp1/lr0.1"
    assert source["files"] == [[n, os.path.getsize(folder / n)] for n in events_of(folder)]
    sparse = load_summary(tmp_path / "store" / "runs" / "exp1-lr0.01")["config"]["tensorboard"]
    assert (sparse["started"], sparse["ended"]) == (wall(1), wall(96))  # the first and last events' times
    renamed = load_summary(tmp_path / "store" / "runs" / "exp2")["config"]["tensorboard"]["renamed"]
    assert renamed == {"tb_grad_norm": "grad_norm", "my_loss": "my loss"}


def test_wall_s_is_the_events_own_time_on_the_steps_log_says_it(tmp_path):
    logdir = tmp_path / "logs"
    walls = {}
    with SummaryWriter(logdir / "run") as w:
        t = T0
        for s in range(200):
            t += 0.3 if s < 100 else 1.7  # later steps slower: each says its clock
            walls[s] = t
            w.add_scalar("loss", 1.0, s, walltime=t)
    somatize.import_tensorboard(logdir, tmp_path / "store")
    said, last = {}, -1e18
    for s, t in walls.items():  # the Trainer's rule (CLOCKS_*), on the events' own clock
        if s < 10 or s % 20 == 0 or t >= last + 1.0:
            said[s], last = t, t
    got = curve(tmp_path / "store", "run", "wall_s")
    assert {int(f): v for f, v in got.items()} == said
    assert len(said) < 200 and all(s in said for s in range(100, 200))


def test_progress_draws_an_imported_run_over_the_events_own_time(tmp_path):
    logdir = tmp_path / "logs"
    with SummaryWriter(logdir / "r") as w:
        for s in range(60):  # a step every 0.5 s: wall_s said on some, the others drawn between them
            w.add_scalar("loss", 1.0 / (s + 1), s, walltime=T0 + 0.5 * s)
    somatize.import_tensorboard(logdir, tmp_path / "store")
    svg = parse(progress(tmp_path / "store", run="r", x="relative").to_html()).find(f".//{SVG}svg")
    (points, (dx, _)) = read_curve(svg)
    assert [x for x, _ in points] == pytest.approx([0.5 * s for s in range(60)], abs=dx)


def test_importing_again_skips_each_run_naming_it(logdir, tmp_path):
    store = tmp_path / "store"
    assert somatize_cli("import", "tensorboard", logdir, store).returncode == 0
    before = {p: os.stat(p).st_mtime_ns for p in sorted((store / "runs").rglob("*"))}
    again = somatize_cli("import", "tensorboard", logdir, store)
    assert again.returncode == 0, again.stderr
    assert again.stdout.splitlines() == [
        "skipped   exp1/lr0.01 -> run exp1-lr0.01: imported before, from the same 1 event file",
        "skipped   exp1/lr0.1 -> run exp1-lr0.1: imported before, from the same 2 event files",
        "skipped   exp2 -> run exp2: imported before, from the same 1 event file",
        f"3 folders of event files: 3 skipped; 0 points on 0 steps imported into {store}",
    ]
    assert {p: os.stat(p).st_mtime_ns for p in sorted((store / "runs").rglob("*"))} == before

    with SummaryWriter(logdir / "exp2") as w:  # the folder changed since: a new event file
        w.add_scalar("late", 1.0, 9, walltime=wall(9))
    changed = somatize.import_tensorboard(logdir, store)[-1]
    assert changed.outcome == "skipped" and changed.run == "exp2"
    assert "imported before from other event files (1 file" in changed.said
    assert "now 2 files" in changed.said and "remove run exp2 from the store" in changed.said


def test_a_name_taken_by_another_run_is_left_alone(logdir, tmp_path):
    store = Store(tmp_path / "store")
    with Recorder(store, run="exp2") as r:
        r.log({"loss": 1.0})
    got = {o.folder: o for o in somatize.import_tensorboard(logdir, store)}
    assert got["exp2"].run == "exp2-2" and got["exp2"].outcome == "imported"
    assert list(curve(store, "exp2", "loss")) == [1.0]
    assert somatize.import_tensorboard(logdir, store)[-1].outcome == "skipped"  # found again, as exp2-2


def records(path):
    """Each record's (start, end) in an event file: its framing read by hand
    (length, its crc, the data, its crc)."""
    data = path.read_bytes()
    out, at = [], 0
    while at < len(data):
        (length,) = struct.unpack_from("<Q", data, at)
        out.append((at, at + 12 + length + 4))
        at += 12 + length + 4
    return out


def one_scalar_a_record(tmp_path, steps=50):
    """A logdir of one run whose file holds a record per step (record 0 is
    the file's version): step s is record s + 1."""
    logdir = tmp_path / "logs"
    with SummaryWriter(logdir / "cut") as w:
        for s in range(steps):
            w.add_scalar("loss", float(s), s, walltime=wall(s))
    (path,) = (logdir / "cut").iterdir()
    return logdir, path


@pytest.mark.parametrize("where", [5, 14, 20])  # in the length, in its crc, in the data
def test_a_file_cut_mid_record_imports_the_whole_records_and_names_the_rest(tmp_path, where):
    logdir, path = one_scalar_a_record(tmp_path)
    start, end = records(path)[31]  # step 30's record
    with open(path, "r+b") as f:
        f.truncate(start + where)
    done = somatize_cli("import", "tensorboard", logdir, tmp_path / "store")
    assert done.returncode == 1, done.stdout + done.stderr
    line = done.stdout.splitlines()[0]
    assert line.startswith("partial   cut -> run cut: 30 steps, 30 points; ")
    assert f"{path.name} from byte {start:,}: ends inside a record" in line
    assert f"{where:,} bytes from there not read" in line
    assert by_step(tmp_path / "store", "cut", "loss") == {s: float(s) for s in range(30)}
    assert runs(tmp_path / "store")["state"].tolist() == ["finished"]
    again = somatize_cli("import", "tensorboard", logdir, tmp_path / "store")
    assert again.returncode == 0 and "imported before, from the same 1 event file (partial: " in again.stdout


def test_a_record_that_does_not_verify_ends_its_files_reading(tmp_path):
    logdir, path = one_scalar_a_record(tmp_path)
    start, end = records(path)[21]  # step 20's record
    data = bytearray(path.read_bytes())
    data[start + 14] ^= 0xFF  # a byte of its data: its crc no longer holds
    path.write_bytes(bytes(data))
    with pytest.warns(RuntimeWarning, match=f"{path.name} from byte {start:,}: a record that does not verify"):
        (got,) = somatize.import_tensorboard(logdir, tmp_path / "store")
    assert got.outcome == "partial" and (got.steps, got.points) == (20, 20)
    assert by_step(tmp_path / "store", "cut", "loss") == {s: float(s) for s in range(20)}


def test_links_are_not_followed_and_a_fifo_is_not_opened(logdir, tmp_path):
    outside = tmp_path / "outside"
    with SummaryWriter(outside / "secret") as w:
        w.add_scalar("loss", 1.0, 0, walltime=wall(0))
    (secret,) = (outside / "secret").iterdir()
    os.symlink(outside, logdir / "elsewhere")  # a folder outside LOGDIR
    os.symlink(secret, logdir / "exp2" / "events.out.tfevents.9.linked")  # an event file outside
    os.mkfifo(logdir / "exp1" / "events.out.tfevents.9.fifo")  # opened, it would wait for a writer
    store = tmp_path / "store"
    done = somatize_cli("import", "tensorboard", logdir, store)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines()[:3] == [
        "not read  elsewhere: a link to a folder, not followed",
        "not read  exp1/events.out.tfevents.9.fifo: a FIFO, not a regular file, not opened",
        "not read  exp2/events.out.tfevents.9.linked: a link, not followed",
    ]
    assert sorted(runs(store)["run"]) == ["exp1-lr0.01", "exp1-lr0.1", "exp2"]  # no "elsewhere-secret"
    from somatize.record._runs import load_summary

    files = load_summary(store / "runs" / "exp2")["config"]["tensorboard"]["files"]
    assert [name for name, _ in files] == events_of(logdir / "exp2")[:1]


def test_a_name_that_is_not_text_neither_breaks_a_line_nor_the_config(tmp_path):
    logdir = tmp_path / "logs"
    with SummaryWriter(logdir / "plain") as w:  # TensorBoard's writer takes no such name: renamed after
        w.add_scalar("loss", 1.0, 0, walltime=wall(0))
    os.rename(logdir / "plain", os.path.join(os.fsencode(logdir), b"bad\xffname\nimported  fake"))  # not UTF-8
    done = somatize_cli("import", "tensorboard", logdir, tmp_path / "store")
    assert done.returncode == 0, done.stdout + done.stderr
    first = done.stdout.splitlines()[0]
    assert first.startswith("imported  bad\\xffname\\x0aimported  fake -> run bad_name_imported_fake: 1 step")
    assert len(done.stdout.splitlines()) == 2
    from somatize.record._runs import load_summary

    source = load_summary(tmp_path / "store" / "runs" / "bad_name_imported_fake")["config"]["tensorboard"]
    assert source["folder"] == "bad\\xffname\\x0aimported  fake"
    assert somatize.import_tensorboard(logdir, tmp_path / "store")[0].outcome == "skipped"


def test_a_failed_import_leaves_no_run(logdir, tmp_path):
    from somatize.record._log import series_file_name

    store = Store(tmp_path / "store")
    series = store.path / "runs" / "exp2" / "series"
    series.mkdir(parents=True)
    os.mkfifo(series / series_file_name("late"))  # where the run's series goes: writing it fails
    with pytest.warns(RuntimeWarning, match="failed +exp2 -> run exp2: .*nothing of it kept"):
        got = {o.folder: o for o in somatize.import_tensorboard(logdir, store)}
    assert got["exp2"].outcome == "failed"
    assert sorted(runs(store)["run"]) == ["exp1-lr0.01", "exp1-lr0.1"]  # exp2 is no run, not a half one
    assert sorted(p.name for p in (store.path / "runs" / "exp2").iterdir()) == ["lock", "series"]


def test_an_import_killed_while_writing_is_written_again(logdir, tmp_path):
    store = Store(tmp_path / "store")
    files = [[n, os.path.getsize(logdir / "exp2" / n)] for n in events_of(logdir / "exp2")]
    half = Recorder(store, run="exp2", config={"tensorboard": {"folder": "exp2", "files": files}})
    half.log({"late": 9.0})
    half.close("interrupted")  # as a process killed mid-import leaves it
    got = {o.folder: o for o in somatize.import_tensorboard(logdir, store)}
    assert got["exp2"].outcome == "imported" and got["exp2"].run == "exp2"
    assert by_step(store, "exp2", "late") == {2: 7.0, 5: 8.0}
    assert runs(store).set_index("run").loc["exp2", "state"] == "finished"


def test_a_bad_logdir_or_store_is_refused_before_anything_is_written(tmp_path, logdir):
    missing = somatize_cli("import", "tensorboard", tmp_path / "nope", tmp_path / "store")
    assert missing.returncode == 2 and "no such folder; give the folder TensorBoard's --logdir" in missing.stderr
    (tmp_path / "afile").write_text("x")
    assert "is not a folder" in somatize_cli("import", "tensorboard", tmp_path / "afile", tmp_path / "s").stderr
    (tmp_path / "empty").mkdir()
    empty = somatize_cli("import", "tensorboard", tmp_path / "empty", tmp_path / "store")
    assert empty.returncode == 2 and "holds no TensorBoard event file" in empty.stderr
    (tmp_path / "theirs").mkdir()
    (tmp_path / "theirs" / "notes.txt").write_text("someone's")
    theirs = somatize_cli("import", "tensorboard", logdir, tmp_path / "theirs")
    assert theirs.returncode == 2 and "is not a store" in theirs.stderr
    assert not (tmp_path / "store").exists() and os.listdir(tmp_path / "theirs") == ["notes.txt"]
    with pytest.raises(somatize.SomatizeValueError, match="no such folder"):
        somatize.import_tensorboard(tmp_path / "nope", tmp_path / "store")
    with pytest.raises(somatize.SomatizeTypeError, match="logdir takes the path"):
        somatize.import_tensorboard(42, tmp_path / "store")


@pytest.mark.parametrize("parts,expected", [
    (("exp1", "lr0.1"), "exp1-lr0.1"),
    (("café", "a b=1"), "cafe-a_b_1"),
    ((".hidden",), "hidden"),
    ((), "logs"),
    (("x" * 300,), "x" * 181 + "-" + "?"),
])
def test_a_folder_path_becomes_a_run_name(parts, expected):
    name = tb.run_name(parts, "logs")
    assert somatize._store.names.is_run_name(name)
    if expected.endswith("?"):
        assert name.startswith(expected[:-1]) and len(name) == 190
        assert tb.run_name(("x" * 299 + "y",), "logs") != name  # a digest keeps two long paths apart
    else:
        assert name == expected


def test_tags_become_facts_log_takes():
    taken = set()
    got = [taken.add(n) or n for n in (tb.fact_name(t, taken) for t in
                                      ["train/loss", "loss", "step", "wall_s", "grad_norm/l1", "a b", "a_b",
                                       "config", "9lives"])]
    assert got == ["train/loss", "loss", "tb_step", "tb_wall_s", "tb_grad_norm/l1", "a_b", "a_b-2",
                   "tb_config", "_9lives"]
