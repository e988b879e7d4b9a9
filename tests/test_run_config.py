"""A run's configuration is part of its record: kept in summary.json as
"config", read strictly, shown as ``config.<key>`` columns by
``somatize.record.runs`` and ``somatize runs``, and fixed for the run's life
(a resume omits it or gives the same)."""

import math
import subprocess
import sys

import numpy as np
import orjson
import pytest

from somatize import DamagedError, Recorder, Store
from somatize.record import facts, runs


def record(store, run, config, losses=(1.0, 0.5)):
    with Recorder(store, run=run, config=config) as r:
        for value in losses:
            r.forward_began()
            r({"fact": "finished", "took_us": 1})
            r({"fact": "loss", "value": value})
    return r


def summary(store, run):
    return orjson.loads((store.path / "runs" / run / "summary.json").read_bytes())


def test_the_config_is_kept_in_the_summary_as_a_json_object(tmp_path):
    store = Store(tmp_path / "s")
    record(store, "a", {"lr": 0.1, "layers": (64, 32), "optim": {"name": "adam", "beta": 0.9}, "seed": None})
    assert summary(store, "a")["config"] == {"lr": 0.1, "layers": [64, 32],
                                             "optim": {"name": "adam", "beta": 0.9}, "seed": None}


def test_runs_has_one_column_per_config_key_nested_keys_dotted(tmp_path):
    store = Store(tmp_path / "s")
    record(store, "a", {"lr": 0.1, "optim": {"beta": 0.9}})
    record(store, "b", {"lr": 0.01, "batch": 32})
    record(store, "plain", None)
    table = runs(store).set_index("run")
    assert table.loc["a", "config.lr"] == 0.1 and table.loc["b", "config.lr"] == 0.01
    assert table.loc["a", "config.optim.beta"] == 0.9
    assert table.loc["b", "config.batch"] == 32
    assert math.isnan(table.loc["a", "config.batch"])  # a key a run lacks is empty
    assert table.loc["plain", ["config.lr", "config.batch"]].isna().all()
    columns = list(table.reset_index().columns)
    assert columns.index("config.lr") < columns.index("loss.last")  # the settings, then the outcomes


def test_numpy_numbers_in_a_config_are_kept_as_plain_numbers(tmp_path):
    store = Store(tmp_path / "s")
    for lr in np.logspace(-3, -1, 2):  # what a sweep's for loop hands over
        record(store, f"lr-{lr:.0e}", {"lr": lr, "epochs": np.int64(3)})
    assert summary(store, "lr-1e-03")["config"] == {"lr": 0.001, "epochs": 3}


@pytest.mark.parametrize(
    ("config", "named"),
    [
        ({"optim": {"lr": object()}}, "config['optim']['lr']"),
        ({"layers": [64, {1, 2}]}, "config['layers'][1]"),
        ({"lr": float("nan")}, "config['lr']"),
        ({"sizes": {1: 64}}, "config['sizes']"),
        ({"big": 1 << 70}, "config['big']"),
        ({"w": np.zeros(3)}, "config['w']"),
    ],
)
def test_a_config_json_cannot_hold_is_refused_naming_the_key_before_anything_is_written(tmp_path, config, named):
    store = Store(tmp_path / "s")
    with pytest.raises(TypeError) as e:
        Recorder(store, run="r", config=config)
    assert type(e.value).__module__.startswith("somatize")
    assert named in str(e.value)
    assert not (store.path / "runs" / "r").exists()


def test_a_config_that_is_not_a_dict_is_refused_saying_what_to_write(tmp_path):
    with pytest.raises(TypeError, match=r"config=\{'lr'"):
        Recorder(Store(tmp_path / "s"), run="r", config=[("lr", 0.1)])


def test_resuming_without_a_config_keeps_the_recorded_one(tmp_path):
    store = Store(tmp_path / "s")
    record(store, "a", {"lr": 0.1})
    with Recorder(store, run="a", resume=True) as r:
        r.forward_began()
        r({"fact": "loss", "value": 0.25})
    assert summary(store, "a")["config"] == {"lr": 0.1}
    assert summary(store, "a")["forwards"] == 3


def test_resuming_with_the_same_config_is_accepted(tmp_path):
    store = Store(tmp_path / "s")
    record(store, "a", {"lr": 0.1, "layers": [64]})
    Recorder(store, run="a", resume=True, config={"layers": (64,), "lr": 0.1}).close()
    assert summary(store, "a")["config"] == {"lr": 0.1, "layers": [64]}


@pytest.mark.parametrize("other", [{"lr": 0.2}, {"lr": 0.1, "seed": 1}, {"lr": 1}])
def test_resuming_with_another_config_is_refused_naming_the_key_and_the_run_is_untouched(tmp_path, other):
    store = Store(tmp_path / "s")
    record(store, "a", {"lr": 0.1})
    before = (store.path / "runs" / "a" / "summary.json").read_bytes()
    with pytest.raises(ValueError, match="another config") as e:
        Recorder(store, run="a", resume=True, config=other)
    differs = "'seed'" if "seed" in other else "'lr'"
    assert differs in str(e.value) and "without config=" in str(e.value)
    assert (store.path / "runs" / "a" / "summary.json").read_bytes() == before
    assert [f["value"] for f in facts(store, "a") if f["fact"] == "loss"] == [1.0, 0.5]
    Recorder(store, run="a", resume=True).close()  # the refusal left no lock behind


def test_a_summary_written_before_configs_reads_with_an_empty_one(tmp_path):
    store = Store(tmp_path / "s")
    record(store, "old", None)
    path = store.path / "runs" / "old" / "summary.json"
    s = orjson.loads(path.read_bytes())
    del s["config"]
    path.write_bytes(orjson.dumps(s))
    table = runs(store)
    assert table.loc[0, "state"] == "finished"
    Recorder(store, run="old", resume=True, config={}).close()


@pytest.mark.parametrize("forged", [[1, 2], "lr=0.1", 3])
def test_a_summary_whose_config_is_not_an_object_lists_as_damaged_naming_the_field(tmp_path, forged):
    store = Store(tmp_path / "s")
    record(store, "a", {"lr": 0.1})
    record(store, "b", {"lr": 0.2})
    path = store.path / "runs" / "a" / "summary.json"
    s = orjson.loads(path.read_bytes())
    s["config"] = forged
    path.write_bytes(orjson.dumps(s))
    table = runs(store).set_index("run")
    assert table.loc["a", "state"] == "damaged" and "'config'" in table.loc["a", "problem"]
    assert table.loc["b", "state"] == "finished" and table.loc["b", "config.lr"] == 0.2
    with pytest.raises(DamagedError, match="config"):
        facts(store, "a")


def somatize(*args):
    return subprocess.run([sys.executable, "-m", "somatize.cli", *map(str, args)], capture_output=True, text=True)


def test_somatize_runs_shows_the_config_as_columns(tmp_path):
    store = Store(tmp_path / "s")
    record(store, "a", {"lr": 0.1, "optim": {"name": "adam"}}, losses=(0.5,))
    record(store, "b", {"lr": 0.01, "layers": [64, 64]}, losses=(0.25,))
    done = somatize("runs", store.path)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.strip().splitlines()
    head = lines[0].split()
    assert head[:4] == ["run", "state", "forwards", "facts"]
    assert {"config.lr", "config.optim.name", "config.layers"} <= set(head)
    assert head.index("config.lr") < head.index("loss.last")
    line_a = next(line for line in lines if line.startswith("a "))
    line_b = next(line for line in lines if line.startswith("b "))
    assert "0.1" in line_a.split() and "adam" in line_a.split() and "[64,64]" not in line_a
    assert "0.01" in line_b.split() and "[64,64]" in line_b.split()
