"""A hostile record: anything on disk may have been put there by someone else.

Each case spoils one run ("r") of a store that also holds a sound run
("good"): a symlink out of the store (for runs/, the run's folder, each file),
a FIFO in place of a file, a symlink to /dev/zero, a forged summary or index.
Every public call then runs in a child process that
- proves with an audit hook that nothing outside the store is opened (unless
  with O_NOFOLLOW, which refuses a symlink) and nothing outside is removed,
  truncated or renamed;
- has its address space bounded (RLIMIT_AS), so reading /dev/zero to the end
  or allocating by a forged count fails;
- is killed if it does not finish in 60 s (a guard against FIFOs, not a
  measurement).
Each call must end in a result or a SomatizeError that names the spoiled file,
and ``somatize check`` must exit 1 with a report.
"""

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import orjson
import pytest

import somatize
from somatize import Recorder, Store
from somatize.record import _log

CHILD = r"""
import io, json, os, resource, sys, traceback
store, outside = sys.argv[1], sys.argv[2]
import numpy, pandas
import somatize
from somatize import Recorder, SomatizeError
from somatize.record import curve, facts, forwards, nodes, runs
from somatize.cli import main
# every module a call may need, loaded before the hook watches
import somatize.record._queries, somatize.record._check
from somatize._store import check as _c, store as _s
import difflib, contextlib

resource.setrlimit(resource.RLIMIT_AS, (3 << 30, 3 << 30))
store_real = os.path.realpath(store)
modules = {os.path.realpath(p) for p in sys.path if p and os.path.isdir(p)}
seen = []

def inside(path):
    return path == store_real or path.startswith(store_real + os.sep)

def hook(event, args):
    if event == "open":
        path, flags = args[0], args[2]
        if not isinstance(path, (str, bytes, os.PathLike)):
            return
        path = os.fsdecode(path)
        if not os.path.isabs(path):  # a name opened in a folder's descriptor, not in the working folder:
            return                   # where those resolve, the test of links below reads from /proc/self/fd
        full = os.path.abspath(path)
        if any(full.startswith(m + os.sep) for m in modules) or full.endswith((".py", ".pyc", ".so")):
            return
        if os.path.realpath(full) == store_real:  # the store's own folder (opened to walk it)
            return
        if full == "/proc/meminfo" and isinstance(flags, int) and flags & os.O_ACCMODE == os.O_RDONLY:
            return  # the kernel's count of unwritten bytes, read before a commit's syncfs (files.unwritten_bytes)
        parent = os.path.realpath(os.path.dirname(full))
        nofollow = isinstance(flags, int) and flags & os.O_NOFOLLOW
        if not inside(parent) or not (nofollow or inside(os.path.realpath(full))):
            seen.append(("open", full))
    elif event in ("os.remove", "os.rename", "os.truncate", "os.rmdir", "shutil.rmtree"):
        path = args[0]
        if isinstance(path, (str, bytes, os.PathLike)):
            full = os.path.abspath(os.fsdecode(path))
            if not inside(os.path.realpath(os.path.dirname(full))):
                seen.append((event, full))

sys.addaudithook(hook)

def call(name, fn):
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            value = fn()
        return {"call": name, "ok": True, "value": value if isinstance(value, (int, str)) else None,
                "out": out.getvalue()}
    except SomatizeError as e:
        return {"call": name, "ok": False, "error": type(e).__name__, "message": str(e)}
    except BaseException as e:
        return {"call": name, "crash": traceback.format_exc()}

def resume():
    r = Recorder(store, run="r", resume=True)
    r.forward_began()
    r({"fact": "loss", "value": 1.0})
    r.close()

results = [
    call("facts", lambda: len(facts(store, "r"))),
    call("facts forward", lambda: len(facts(store, "r", forward=0))),
    call("forwards", lambda: len(forwards(store, "r"))),
    call("nodes", lambda: len(nodes(store, "r"))),
    call("curve", lambda: len(curve(store, "r", "loss"))),
    call("runs", lambda: len(runs(store))),
    call("somatize runs", lambda: main(["runs", store])),
    call("somatize check", lambda: main(["check", store])),
    call("good", lambda: len(facts(store, "good"))),
    call("resume", resume),
]
print(json.dumps({"results": results, "seen": seen}))
"""


def make(tmp_path):
    store = Store(tmp_path / "store")
    for run in ("good", "r"):
        with Recorder(store, run=run) as recorder:
            for i in range(40):
                recorder.forward_began()
                recorder({"fact": "ran", "node": "a", "began_us": 0, "took_us": 3})
                recorder({"fact": "finished", "took_us": 5})
                recorder({"fact": "loss", "value": 1 / (i + 1)})
    outside = tmp_path / "outside"
    shutil.copytree(store.path / "runs" / "r", outside / "r")  # a run someone points into the store
    shutil.copytree(store.path / "runs", outside / "runs")
    return store.path, outside


FILES = ["summary.json", "facts.log", "index.bin", "lock", "series/loss.bin"]


def symlink_out(name):
    def spoil(run, outside):
        target = outside / ("runs" if name == "runs" else "r" if name == "." else f"r/{name}")
        path = run.parent if name == "runs" else run if name == "." else run / name
        shutil.rmtree(path) if path.is_dir() else path.unlink()
        path.symlink_to(target)
    return spoil


def fifo(name):
    def spoil(run, outside):
        (run / name).unlink()
        os.mkfifo(run / name)
    return spoil


def zero(name):
    def spoil(run, outside):
        (run / name).unlink()
        (run / name).symlink_to("/dev/zero")
    return spoil


def summary_says(**fields):
    def spoil(run, outside):
        s = orjson.loads((run / "summary.json").read_bytes())
        s.update(fields)
        (run / "summary.json").write_bytes(orjson.dumps(s))
    return spoil


def forged_index(run, outside):
    """An index whose checksum the summary agrees with, but which points past the log."""
    entries = np.array([(0, 10**9, 0, 1 << 40), (-5, 3, -100, 64)], _log.INDEX).tobytes()
    (run / "index.bin").write_bytes(entries)
    summary_says(index=[len(entries), _log.checksum(entries)])(run, outside)


def forged_series(run, outside):
    """A series whose checksum the summary agrees with, at forwards far past the run."""
    data = _log.points_bytes([10**12, -(10**12), 3], [1.0, 2.0, 3.0])
    (run / "series" / "loss.bin").write_bytes(data)
    s = orjson.loads((run / "summary.json").read_bytes())
    s["series"]["loss"] = [len(data), _log.checksum(data)]
    (run / "summary.json").write_bytes(orjson.dumps(s))


def huge_summary(run, outside):
    (run / "summary.json").write_bytes(b'{"run": "' + b"x" * (20 << 20) + b'"}')


CASES = {
    "runs/ a symlink out": (symlink_out("runs"), "runs"),
    "run folder a symlink out": (symlink_out("."), "symlink"),
    "series/ a symlink out": (symlink_out("series"), "series"),
    **{f"{f} a symlink out": (symlink_out(f), f.split("/")[-1]) for f in FILES},
    **{f"{f} a FIFO": (fifo(f), f.split("/")[-1]) for f in FILES},
    **{f"{f} to /dev/zero": (zero(f), f.split("/")[-1]) for f in FILES if f != "lock"},
    "series/ a file": (lambda run, outside: (shutil.rmtree(run / "series"), (run / "series").write_text("x")),
                       "series"),
    "forwards 10**12": (summary_says(forwards=10**12, facts=10**12, log_bytes=10**12), "facts.log"),
    "summary from the year 10**292": (summary_says(started=1e300, updated=1e300), "summary.json"),
    "summary a list": (lambda run, outside: (run / "summary.json").write_bytes(b"[1, 2]"), "summary.json"),
    "summary of 20 MiB": (huge_summary, "summary.json"),
    "index forged with its checksum": (forged_index, "index.bin"),
    "series forged with its checksum": (forged_series, None),
}


@pytest.mark.parametrize("case", CASES)
def test_a_spoiled_run_never_hangs_reads_outside_or_crashes(tmp_path, case):
    spoil, names = CASES[case]
    root, outside = make(tmp_path)
    spoil(root / "runs" / "r", outside)
    before = {p: p.read_bytes() for p in outside.rglob("*") if p.is_file()}
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-c", CHILD, str(root), str(outside)],
                          capture_output=True, text=True, timeout=60, check=False, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["seen"] == [], report["seen"]
    by_call = {r["call"]: r for r in report["results"]}
    for r in report["results"]:
        assert "crash" not in r, f"{r['call']}: {r['crash']}"
        if not r["ok"] and names is not None:
            assert names in r["message"], (r["call"], r["message"])
    check = by_call["somatize check"]
    assert check["ok"] and check["value"] == 1 and "problem" in check["out"], check
    if case != "runs/ a symlink out":
        assert by_call["good"]["ok"] and by_call["good"]["value"] == 120  # the sound run reads as ever
        listing = by_call["somatize runs"]
        assert listing["ok"] and listing["value"] == 0 and "good" in listing["out"]
    else:
        assert by_call["somatize runs"]["value"] == 1
    assert {p: p.read_bytes() for p in outside.rglob("*") if p.is_file()} == before  # nothing outside changed


# ---- links out, proven by the opens that succeed ----------------------------------------------------

OPENED = r"""
import builtins, contextlib, io, json, os, sys, traceback
store, outside, swap_at = os.path.realpath(sys.argv[1]), os.path.realpath(sys.argv[2]), int(sys.argv[3])
import numpy, pandas
from somatize import SomatizeError, Store, diagnose
from somatize.record import curve, facts, forwards, nodes, runs
from somatize.cli import main
import somatize.record._queries, somatize.record._check, somatize._store.check

def beyond(path):
    return path == outside or path.startswith(outside + os.sep)

attempted, read = [], []  # every open asked for; every one that came back pointing outside
RACED, HELD = os.path.join(store, "runs", "raced"), os.path.join(store, "tmp", "raced")
armed = [0]  # opens of the raced run's folder (or of a path through it) left before the swap

def target(fd):
    return os.readlink(f"/proc/self/fd/{fd}")  # where the kernel resolved the open, links and all

def hook(event, args):
    if event == "open" and isinstance(args[0], (str, bytes)):
        path = os.fsdecode(args[0])
        attempted.append(path)
        if armed[0] and "raced" in path.split(os.sep):
            armed[0] -= 1
        if armed[0] == 0 and "raced" in path.split(os.sep) and not os.path.islink(RACED):
            # someone swaps the run's folder for a link out as it is opened (the first
            # time, or a later one): after any check made by path, before the open
            os.rename(RACED, HELD)
            os.symlink(os.path.join(outside, "r"), RACED)
    elif event in ("os.listdir", "os.scandir") and args and isinstance(args[0], (str, bytes)):
        if beyond(os.path.realpath(os.fsdecode(args[0]))):  # a folder outside listed through a link
            read.append(f"{event} {os.fsdecode(args[0])}")

real_os_open, real_io_open = os.open, io.open

def os_open(path, flags, *a, **k):
    fd = real_os_open(path, flags, *a, **k)
    if beyond(target(fd)):
        read.append(f"os.open {path} -> {target(fd)}")
    return fd

def io_open(file, *a, **k):
    f = real_io_open(file, *a, **k)
    if beyond(target(f.fileno())):
        read.append(f"open {file} -> {target(f.fileno())}")
    return f

sys.addaudithook(hook)
os.open, io.open, builtins.open = os_open, io_open, io_open

def call(name, fn):
    if os.path.islink(RACED):  # the run as it was, and the race armed again
        os.unlink(RACED)
        os.rename(HELD, RACED)
    armed[0] = swap_at
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            value = fn()
        return {"call": name, "ok": True, "value": value if isinstance(value, (int, str, dict)) else None,
                "out": out.getvalue()}
    except SomatizeError as e:
        return {"call": name, "ok": False, "error": type(e).__name__, "message": str(e)}
    except BaseException:
        return {"call": name, "crash": traceback.format_exc()}

def rows():
    return {r["run"]: {"state": r["state"], "problem": str(r.get("problem"))} for r in runs(store).to_dict("records")}

results = [call("runs", rows), call("Store.runs", lambda: len(Store(store, readonly=True).runs())),
           call("somatize runs", lambda: main(["runs", store])),
           call("somatize check", lambda: main(["check", store]))]
for run in sys.argv[4:]:
    results += [call(f"facts {run}", lambda: len(facts(store, run))),
                call(f"facts {run} forward", lambda: len(facts(store, run, forward=3))),
                call(f"forwards {run}", lambda: len(forwards(store, run))),
                call(f"nodes {run}", lambda: len(nodes(store, run))),
                call(f"curve {run}", lambda: len(curve(store, run, "loss"))),
                call(f"diagnose {run}", lambda: len(diagnose(store, run)))]
print(json.dumps({"results": results, "read": read, "attempted": len(attempted)}))
"""


def _plant_links(root, outside):
    """runs/evil a link to a run outside; evil2's summary.json and evil3's
    facts.log links to that run's files (whole, sound files: followed, they
    would read as a run); "raced" is a sound run whose folder the child swaps
    for a link out at the first open of anything in it."""
    runs = root / "runs"
    (runs / "evil").symlink_to(outside / "r")
    for run, file in (("evil2", "summary.json"), ("evil3", "facts.log"), ("raced", None)):
        shutil.copytree(runs / "r", runs / run)
        if file:
            (runs / run / file).unlink()
            (runs / run / file).symlink_to(outside / "r" / file)
    return {"evil": "runs/evil", "evil2": "summary.json", "evil3": "facts.log", "raced": "runs/raced"}


@pytest.mark.parametrize("swap_at", [1, 2], ids=["swapped at its first open", "swapped at its second"])
def test_no_byte_outside_is_read_through_a_run_folder_or_a_run_file_that_links_out(tmp_path, swap_at):
    """Issue 23: the audit hook sees the opens asked for; here every open
    that succeeds is also looked at where the kernel resolved it
    (/proc/self/fd), so one that followed a link out shows even when asked
    with O_NOFOLLOW (which guards only a path's last part). A run folder
    swapped for a link between a check by path and the open (what a
    process sharing the store can do) must be met by an open that follows
    no part below the store."""
    root, outside = make(tmp_path)
    links = _plant_links(root, outside)
    env = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-c", OPENED, str(root), str(outside), str(swap_at), *links],
                          capture_output=True, text=True, timeout=120, check=False, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["attempted"] > 50  # the hook watched the calls (not vacuous)
    assert report["read"] == [], report["read"]
    by_call = {r["call"]: r for r in report["results"]}
    for r in report["results"]:
        assert "crash" not in r, f"{r['call']}: {r['crash']}"
        run = r["call"].split()[1] if r["call"].split()[0] in ("facts", "forwards", "nodes", "curve",
                                                                 "diagnose") else None
        if run is not None and not r["ok"]:  # a refusal names the link (nodes answers from the summary)
            assert links[run] in r["message"] and "link" in r["message"], r
    for run in ("evil", "evil2", "raced"):  # nothing of these reads but through the link
        assert not by_call[f"facts {run}"]["ok"] and not by_call[f"curve {run}"]["ok"]
    listed = by_call["runs"]["value"]
    if swap_at > 1:  # the listing read "raced" in the real folder it opened first, and only there
        assert listed.pop("raced")["state"] == "finished"
        del links["raced"]
    for run, named in links.items():  # each lists as damaged, naming the link
        assert listed[run]["state"] == "damaged", (run, listed[run])
        assert named in listed[run]["problem"] and "link" in listed[run]["problem"], (run, listed[run])
    assert listed["good"]["state"] == "finished"
    check = by_call["somatize check"]
    assert check["value"] == 1 and all(f"run '{run}'" in check["out"] for run in links), check


def test_a_store_whose_runs_is_a_file_is_refused_saying_so_and_check_reports_it(tmp_path, capsys):
    """Issue 23: `somatize runs` exited 1 saying only "is not a folder"."""
    from somatize.cli import main
    from somatize.record import runs

    store = Store(tmp_path / "store")
    (store.path / "runs").write_text("not a folder")
    assert main(["runs", str(store.path)]) == 1  # nothing can be listed: a refusal, not an empty table
    said = capsys.readouterr().err
    assert "runs is a file, not a folder" in said and str(store.path / "runs") in said
    assert "Move it away" in said and "somatize check" in said  # what to do
    with pytest.raises(somatize.DamagedError, match="runs is a file, not a folder"):
        runs(store)
    assert main(["check", str(store.path)]) == 1
    out = capsys.readouterr().out
    assert "problem: " in out and "runs is a file, not a folder" in out


def test_runs_named_like_the_stores_folders_read_as_any_other(tmp_path):
    """A run's files are found from the store's root by position (runs/<run>/…,
    runs/<run>/series/…): a store in a folder named "runs", and runs named
    "runs" and "series", must still read whole and check clean."""
    from somatize.cli import main
    from somatize.record import curve, facts, runs

    store = Store(tmp_path / "runs")
    for run in ("runs", "series"):
        with Recorder(store, run=run, summarising=["loss"]) as recorder:
            for i in range(5):
                recorder.forward_began()
                recorder({"fact": "loss", "value": float(i)})
        assert len(facts(store, run)) == 5 and list(curve(store, run, "loss")) == [0.0, 1.0, 2.0, 3.0, 4.0]
    listed = runs(store)
    assert sorted(listed["run"]) == ["runs", "series"] and set(listed["state"]) == {"finished"}
    assert main(["check", str(store.path)]) == 0
