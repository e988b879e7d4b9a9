"""The command line, run as a user runs it: a real process, real exit codes."""

import subprocess
import sys

from as_nobody import as_nobody

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
    assert float(table["done"]["loss.last"]) == float(f"{0.5 / 30:.4g}")
    assert table["live"]["state"] == "running"  # held by this process
    live.close()
    assert rows(somatize("runs", store.path).stdout)["live"]["state"] == "finished"


def test_runs_says_why_a_run_was_interrupted(tmp_path):
    store, live = make(tmp_path)
    live.close()
    crash = ("import sys\nfrom somatize import Recorder\n"
             "r = Recorder(sys.argv[1], run='crashed')\nr({'fact': 'updated'})\n1 / 0")
    assert subprocess.run([sys.executable, "-c", crash, str(store.path)], capture_output=True).returncode == 1
    out = somatize("runs", store.path).stdout
    assert rows(out)["crashed"]["state"] == "interrupted"
    assert "interrupted: crashed: ZeroDivisionError: division by zero" in out.splitlines()


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


def test_check_counts_what_it_checked_in_good_grammar(tmp_path):
    store = Store(tmp_path / "one")
    Recorder(store, run="only").close()
    store.keep("w", 1)
    last = somatize("check", store.path).stdout.strip().splitlines()[-1]
    assert "(1 object, 1 name, 1 run)" in last
    for i in range(2):
        Recorder(store, run=f"more-{i}").close()
    store.keep("v", 2)
    last = somatize("check", store.path).stdout.strip().splitlines()[-1]
    assert "(2 objects, 2 names, 3 runs)" in last


def test_the_commands_read_a_store_the_user_cannot_write():
    import shutil
    import tempfile
    from pathlib import Path

    base = Path(tempfile.mkdtemp(prefix="somatize-cli-"))  # pytest's tmp_path is root's alone
    try:
        base.chmod(0o755)
        store, live = make(base)
        live.close()
        for p in [store.path, *store.path.rglob("*")]:
            p.chmod(0o555 if p.is_dir() else 0o444)
        before = sorted(store.path.rglob("*"))
        check = as_nobody("-m", "somatize.cli", "check", store.path)
        assert check.returncode == 0, check.stderr
        assert check.stdout.splitlines()[-1].startswith(f"clean: {store.path} ("), check.stdout
        listed = as_nobody("-m", "somatize.cli", "runs", store.path)
        assert listed.returncode == 0, listed.stderr
        table = rows(listed.stdout)
        assert table["live"]["state"] == "finished" and table["done"]["forwards"] == "30", listed.stdout
        assert sorted(store.path.rglob("*")) == before
    finally:
        for p in [base, *base.rglob("*")]:
            p.chmod(0o755)
        shutil.rmtree(base)


def test_a_recorder_refuses_a_readonly_store(tmp_path):
    import pytest

    store = Store(tmp_path / "s")
    with pytest.raises(PermissionError, match=r"read-only.*Recorder\(Store\("):
        Recorder(Store(store.path, readonly=True), run="r")
    assert not (store.path / "runs").exists()


def test_listing_runs_loads_neither_numpy_nor_pandas(tmp_path):
    # importing numpy is most of a 200 ms budget for listing 1,000 runs
    store, live = make(tmp_path)
    live.close()
    code = (
        "import sys\nfrom somatize.cli import main\nmain(['runs', sys.argv[1]])\n"
        "print(sorted(m for m in ('numpy', 'pandas') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code, str(store.path)], capture_output=True, text=True, check=True)
    assert out.stdout.splitlines()[-1] == "[]" and "done" in out.stdout


def table_cells(output):
    """The table's rows as (cells, [(start, end) of each cell]): cells are
    apart by two spaces or more (a cell such as "3 s ago" holds single ones)."""
    import re

    lines = [line for line in output.splitlines() if line and not line.startswith(("damaged:", "("))]
    return [([m.group() for m in re.finditer(r"\S+(?: \S+)*", line)],
             [m.span() for m in re.finditer(r"\S+(?: \S+)*", line)]) for line in lines]


def test_runs_table_aligns_numbers_right_with_thousands_and_four_digits(tmp_path):
    store = Store(tmp_path / "store")
    for name, n, loss in (("big", 1234, 0.000123456), ("small", 7, 12345.678)):
        with Recorder(store, run=name, summarising=["loss"]) as r:
            for _ in range(n):
                r.forward_began()
                r({"fact": "loss", "value": loss})
    done = somatize("runs", store.path)
    rows = table_cells(done.stdout)
    head = rows[0][0]
    assert head[:5] == ["run", "state", "forwards", "facts", "loss.last"]
    by_run = {cells[0]: dict(zip(head, cells)) for cells, _ in rows[1:]}
    assert by_run["big"]["forwards"] == "1,234" and by_run["small"]["forwards"] == "7"
    assert by_run["big"]["facts"] == "1,234"
    assert by_run["big"]["loss.last"] == "0.0001235" and by_run["small"]["loss.last"] == "1.235e+04"
    for k, column in enumerate(head):
        starts = {spans[k][0] for _, spans in rows}
        ends = {spans[k][1] for _, spans in rows}
        if column in ("forwards", "facts", "loss.last"):
            assert len(ends) == 1, column  # numbers end where their column ends
        elif column in ("run", "state"):
            assert len(starts) == 1, column


def test_runs_lists_the_others_and_marks_a_broken_run_damaged(tmp_path):
    store, live = make(tmp_path)
    live.close()
    (store.path / "runs" / "live" / "summary.json").write_bytes(b'{"summarising": 5}')
    done = somatize("runs", store.path)
    assert done.returncode == 0 and "Traceback" not in done.stderr
    rows = table_cells(done.stdout)
    by_run = {cells[0]: dict(zip(rows[0][0], cells)) for cells, _ in rows[1:]}
    assert by_run["done"]["state"] == "finished" and by_run["done"]["forwards"] == "30"
    assert by_run["live"]["state"] == "damaged"
    assert "damaged: live:" in done.stdout and "summary.json" in done.stdout
    checked = somatize("check", store.path)
    assert checked.returncode == 1 and "Traceback" not in checked.stderr and "'live'" in checked.stdout


def test_runs_that_is_a_file_is_reported_not_a_traceback(tmp_path):
    store = Store(tmp_path / "store")
    (store.path / "runs").write_text("not a folder")
    for command in ("runs", "check"):
        done = somatize(command, store.path)
        assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
        assert "runs is a file, not a folder" in done.stdout + done.stderr


def test_runs_with_thousands_of_summarised_facts_shows_a_few_and_says_so(tmp_path):
    store = Store(tmp_path / "store")
    names = [f"m{i:05d}" for i in range(3000)]
    with Recorder(store, run="wide", summarising=names) as r:
        r.forward_began()
        r({"fact": "m00000", "value": 1.0})
    done = somatize("runs", store.path)
    head = table_cells(done.stdout)[0][0]
    assert head == ["run", "state", "forwards", "facts", *(f"{n}.last" for n in names[:6]), "updated"]
    assert "2,994 more summarised facts" in done.stdout
