"""One naming rule for a run's columns (record/_columns): fixed columns are
plain words, the config is ``config.<key>``, a summarised fact is
``<fact>.last|best|min|max``; so no summary can take a fixed column's name,
in ``runs()``, in ``somatize runs`` or in the rows the sidebar reads."""

import os
import subprocess
import sys
import warnings

import pytest

from somatize import Recorder, Store
from somatize.record import runs


def record(store, run, facts, summarising, config=None):
    with Recorder(store, run=run, summarising=summarising, config=config) as r:
        for values in facts:
            r.forward_began()
            r({"fact": "finished", "took_us": 1})
            for name, value in values.items():
                r({"fact": name, "value": value})


def test_summaries_named_like_fixed_columns_do_not_overwrite_them(tmp_path):
    store = Store(tmp_path / "s")
    record(store, "r", [{"loss": 2.0, "pid": 7, "state": 3.0}, {"loss": 1.0, "pid": 5, "state": 4.0}],
           ["loss", "pid", "state"])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # pandas warned of repeated names
        table = runs(store)
    assert table.columns.is_unique
    row = table.set_index("run").loc["r"]
    assert row["state"] == "finished" and row["pid"] == os.getpid()  # the process's id, not the fact's value
    assert (row["state.last"], row["state.min"], row["state.max"], row["state.best"]) == (4.0, 3.0, 4.0, 3.0)
    assert (row["pid.last"], row["pid.min"]) == (5, 5)
    assert (row["loss.last"], row["loss.best"]) == (1.0, 1.0)


def test_best_is_the_max_for_a_fact_named_like_a_score_and_the_min_for_any_other(tmp_path):
    store = Store(tmp_path / "s")
    record(store, "r", [{"loss": 2.0, "val_acc": 0.5}, {"loss": 1.0, "val_acc": 0.9}, {"loss": 3.0, "val_acc": 0.7}],
           ["loss", "val_acc"])
    row = runs(store).iloc[0]
    assert (row["loss.best"], row["val_acc.best"]) == (1.0, 0.9)
    assert (row["loss.last"], row["val_acc.last"]) == (3.0, 0.7)


@pytest.mark.parametrize("name", ["config", "config.lr"])
def test_a_fact_whose_columns_would_be_the_configs_is_refused_before_anything_is_written(tmp_path, name):
    store = Store(tmp_path / "s")
    with pytest.raises(ValueError, match="config") as e:
        Recorder(store, run="r", summarising=["loss", name])
    assert type(e.value).__module__.startswith("somatize")
    assert not (store.path / "runs" / "r").exists()


def test_steps_and_duration_are_columns(tmp_path):
    store = Store(tmp_path / "s")
    record(store, "r", [{"loss": 1.0}] * 3 + [{}], ["loss"])
    row = runs(store).iloc[0]
    assert (row["forwards"], row["steps"]) == (4, 3)  # a step is a loss, as the Trainer records
    assert row["duration"] == pytest.approx((row["updated"] - row["started"]).total_seconds(), abs=1e-6)


def test_the_command_line_names_columns_by_the_same_rule(tmp_path):
    store = Store(tmp_path / "s")
    record(store, "r", [{"loss": 0.5, "state": 9.0}], ["loss", "state"])
    done = subprocess.run([sys.executable, "-m", "somatize.cli", "runs", str(store.path)],
                          capture_output=True, text=True)
    lines = done.stdout.split("\n")
    head = lines[0].split()
    assert head.count("state") == 1 and "state.last" in head and "loss.last" in head
    cells = dict(zip(head, lines[1].split()))
    assert cells["state"] == "finished" and cells["state.last"] == "9"


def test_the_sidebar_rows_carry_best_by_the_same_rule(tmp_path):
    from somatize._server._browse import Browser

    store = Store(tmp_path / "s")
    record(store, "r", [{"loss": 2.0, "acc": 0.5}, {"loss": 1.0, "acc": 0.9}, {"loss": 3.0, "acc": 0.7}],
           ["loss", "acc"])
    browser = Browser(tmp_path)
    (sid,) = [s["id"] for s in browser.stores()]
    row = browser.runs(sid)["runs"][0]
    assert row["summarising"]["loss"]["best"] == 1.0 and row["summarising"]["acc"]["best"] == 0.9
    assert row["state"] == "finished"


def test_a_listing_kept_in_memory_still_sees_a_summary_replaced_or_broken_and_a_log_cut(tmp_path):
    """runs() parses a summary again only when its file changed: a new one
    renamed in, one broken in place, and a log cut in place (no summary
    changed) each show at once."""
    store = Store(tmp_path / "s")
    record(store, "r", [{"loss": 2.0}, {"loss": 1.0}], ["loss"])
    path = store.path / "runs" / "r" / "summary.json"
    assert runs(store).loc[0, "loss.last"] == 1.0 and runs(store).loc[0, "loss.last"] == 1.0
    import orjson

    s = orjson.loads(path.read_bytes())
    s["summarising"]["loss"]["last"] = 0.25
    (path.parent / "new.json").write_bytes(orjson.dumps(s))
    os.replace(path.parent / "new.json", path)
    assert runs(store).loc[0, "loss.last"] == 0.25
    log = store.path / "runs" / "r" / "facts.log"
    size = log.stat().st_size
    with open(log, "r+b") as f:
        f.truncate(size - 5)
    row = runs(store).iloc[0]
    assert row["state"] == "damaged" and "facts.log" in row["problem"]
    with open(log, "r+b") as f:  # mended: the same summary lists as before
        f.truncate(size)
    assert runs(store).loc[0, "state"] == "finished"
    with open(path, "r+b") as f:
        f.write(b"[")  # the first byte of the JSON object, in place
    assert runs(store).loc[0, "state"] == "damaged"


def test_a_run_folder_swapped_for_a_link_after_a_listing_lists_damaged_not_from_memory(tmp_path):
    import shutil

    store = Store(tmp_path / "s")
    record(store, "r", [{"loss": 1.0}], ["loss"])
    assert runs(store).loc[0, "state"] == "finished"  # its summary is now held in memory
    folder = store.path / "runs" / "r"
    moved = tmp_path / "elsewhere"
    shutil.move(folder, moved)  # the very same files (same inodes), outside the store
    os.symlink(moved, folder)
    row = runs(store).iloc[0]
    assert row["state"] == "damaged" and "link" in row["problem"]
