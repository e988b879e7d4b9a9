"""The Recorder and the queries: what goes in comes out, typed, in order."""

import math
import random
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from somatize import Graph, Node, Recorder, Store
from somatize._base.errors import SomatizeKeyError, SomatizeValueError, WatcherError
from somatize.record import curve, facts, forwards, nodes, runs
from somatize.record._summary import EXITED


def a_forward(i, rng):
    """The facts of one training step, as the engine and the Trainer say them."""
    body, head = rng.randrange(50, 500), rng.randrange(10, 90)
    return [
        {"fact": "ran", "node": "body", "began_us": 2, "took_us": body},
        {"fact": "ran", "node": "head", "began_us": 3 + body, "took_us": head},
        {"fact": "finished", "took_us": body + head + 7},
        {"fact": "updated"},
        {"fact": "loss", "value": 1.0 / (i + 1) + rng.random() * 1e-3},
    ]


def record(recorder, steps):
    for step in steps:
        recorder.forward_began()
        for fact in step:
            recorder(fact)


@pytest.fixture
def store(tmp_path):
    return Store(tmp_path / "store")


@pytest.fixture
def steps():
    rng = random.Random(7)
    return [a_forward(i, rng) for i in range(1500)]


def test_each_forward_reads_back_as_it_was_handed_over(store, steps):
    recorder = Recorder(store, run="a-run", summarising=["loss"])
    record(recorder, steps)
    for n in (0, 10, 733, 1499):
        assert facts(store, "a-run", forward=n) == steps[n]
    assert facts(store, run="a-run") == [f for step in steps for f in step]
    recorder.close()


def test_values_keep_their_types(store):
    fact = {"fact": "probe", "node": "n", "i": 3, "f": 2.0, "b": True, "s": "x", "l": [1, 2.5, "y"],
            "d": {"k": 1}, "none": None}
    with Recorder(store, run="typed") as recorder:
        recorder.forward_began()
        recorder(fact)
        recorder({"fact": "loss", "value": np.float32(0.5)})
    got = facts(store, "typed", forward=0)
    assert got[0] == fact
    assert [type(got[0][k]) for k in ("i", "f", "b")] == [int, float, bool]
    assert got[1] == {"fact": "loss", "value": 0.5} and type(got[1]["value"]) is float


def test_facts_after_finished_belong_to_that_forward(store):
    recorder = Recorder(store, run="r")
    recorder.forward_began()
    recorder({"fact": "ran", "node": "a", "began_us": 0, "took_us": 1})
    recorder({"fact": "finished", "took_us": 2})
    recorder({"fact": "loss", "value": 0.25})  # the Trainer's, after the forward
    recorder.forward_began()
    recorder({"fact": "finished", "took_us": 3})
    assert [f["fact"] for f in facts(store, "r", forward=0)] == ["ran", "finished", "loss"]
    assert facts(store, "r", forward=1) == [{"fact": "finished", "took_us": 3}]
    recorder.close()


def test_a_query_sees_facts_not_yet_flushed(store):
    recorder = Recorder(store, run="r")
    recorder.forward_began()
    recorder({"fact": "finished", "took_us": 5})
    assert facts(store, "r", forward=0) == [{"fact": "finished", "took_us": 5}]
    recorder.close()


def test_forwards_table_comes_from_the_series(store, steps):
    with Recorder(store, run="r") as recorder:
        record(recorder, steps)
    table = forwards(store, "r")
    assert list(table["forward"]) == list(range(len(steps)))
    assert list(table["took_us"]) == [s[2]["took_us"] for s in steps]
    assert table["took_us"].dtype == np.int64
    assert list(table["loss"]) == [s[4]["value"] for s in steps]


def test_curve_is_a_named_series_by_forward(store, steps):
    with Recorder(store, run="r") as recorder:
        record(recorder, steps)
    loss = curve(store, "r", "loss")
    assert loss.name == "loss" and loss.index.name == "forward"
    assert list(loss.index) == list(range(len(steps)))
    assert list(loss.values) == [s[4]["value"] for s in steps]
    with pytest.raises(SomatizeKeyError, match="'loss'"):
        curve(store, "r", name="lost")


def test_a_node_fact_with_a_value_is_a_curve_of_its_own(store):
    with Recorder(store, run="r") as recorder:
        for i in range(3):
            recorder.forward_began()
            recorder({"fact": "grad", "node": "body", "value": float(i)})
            recorder({"fact": "grad", "node": "head", "value": 10.0 + i})
    assert list(curve(store, "r", "grad/head")) == [10.0, 11.0, 12.0]
    assert "grad/head" not in forwards(store, "r").columns
    with pytest.raises(SomatizeKeyError, match="'grad/body', 'grad/head'"):
        curve(store, "r", "grad")  # two nodes say it: which one is asked


def test_a_fact_only_one_node_says_is_a_curve_by_its_own_name(store):
    with Recorder(store, run="r") as recorder:
        for i in range(3):
            recorder.forward_began()
            recorder({"fact": "energy", "node": "peak", "value": float(i)})
    assert list(curve(store, "r", "energy")) == list(curve(store, "r", "energy/peak")) == [0.0, 1.0, 2.0]


def test_nodes_table_matches_the_facts(store, steps):
    with Recorder(store, run="r") as recorder:
        record(recorder, steps)
        recorder.forward_began()
        recorder({"fact": "recalled", "node": "body", "began_us": 0, "took_us": 4})
        recorder({"fact": "kept", "node": "body", "took_us": 9})
    table = nodes(store, "r").set_index("node")
    body = [s[0]["took_us"] for s in steps]
    head = [s[1]["took_us"] for s in steps]
    assert list(table.index) == ["body", "head"]
    assert table.loc["body", "ran"] == len(steps) and table.loc["body", "recalled"] == 1
    assert table.loc["body", "total_us"] == sum(body) + 4 + 9
    assert table.loc["head", "max_us"] == max(head)
    assert table.loc["head", "mean_us"] == pytest.approx(sum(head) / len(head))
    assert table["share"].sum() == pytest.approx(1.0)


def test_runs_lists_state_and_summarised_facts(store, steps):
    recorder = Recorder(store, run="r", summarising=["loss"])
    record(recorder, steps)
    listed = runs(store).set_index("run")
    assert listed.loc["r", "state"] == "running"
    assert listed.loc["r", "forwards"] == len(steps)
    assert listed.loc["r", "facts"] == 5 * len(steps)
    losses = [s[4]["value"] for s in steps]
    assert listed.loc["r", "loss.last"] == losses[-1] and listed.loc["r", "loss.min"] == min(losses)
    recorder.close()
    assert runs(store).set_index("run").loc["r", "state"] == "finished"


def test_nan_loss_keeps_in_the_curve(store):
    with Recorder(store, run="r") as recorder:
        recorder.forward_began()
        recorder({"fact": "loss", "value": float("nan")})
    assert math.isnan(curve(store, "r", "loss").iloc[0])


@pytest.mark.parametrize("value", [float("nan"), float("inf"), -float("inf")])
def test_a_non_finite_loss_reads_back_as_itself_not_as_missing(store, value):
    """Facts keep NaN and infinities, so a reader tells "not finite" from "missing" (None)."""
    with Recorder(store, run="r") as recorder:
        recorder.forward_began()
        recorder({"fact": "loss", "value": value, "note": None})
        recorder({"fact": "seen", "node": "a", "nested": [1.0], "at": value})
    said = facts(store, "r", forward=0)
    got = said[0]["value"]
    assert (math.isnan(got) if math.isnan(value) else got == value), got
    assert said[0]["note"] is None  # a None stays None
    assert said[1]["nested"] == [1.0] and str(said[1]["at"]) == str(value)


def test_unknown_run_names_the_close_ones(store):
    Recorder(store, run="a-run").close()
    with pytest.raises(SomatizeKeyError, match="'a-run'"):
        facts(store, "a-rnu", forward=0)


@pytest.mark.parametrize("name", ["a/b", "", "two words", "..", "../up", 3])
def test_bad_run_names_are_refused(store, name):
    with pytest.raises(SomatizeValueError, match="letters, digits"):
        Recorder(store, run=name)


def test_a_forward_out_of_range_says_how_many_there_are(store, steps):
    with Recorder(store, run="r") as recorder:
        record(recorder, steps[:12])
    with pytest.raises(SomatizeValueError, match="12 forwards"):
        facts(store, "r", forward=12)
    with pytest.raises(SomatizeValueError, match="12 forwards"):
        facts(store, "r", forward=-1)


def test_two_recorders_of_one_run_in_one_process_are_refused(store):
    first = Recorder(store, run="r")
    with pytest.raises(SomatizeValueError, match=r"recorder.close\(\).*resume=True.*run='r-2'"):
        Recorder(store, run="r")
    first.close()


def test_a_cell_run_again_takes_its_run_over_with_resume(store):
    # the old Recorder may be out of reach (made inline in watching=)
    first = Recorder(store, run="r")
    first.forward_began()
    first({"fact": "loss", "value": 1.0})
    again = Recorder(store, run="r", resume=True)
    assert repr(first).endswith(", closed)")
    again.forward_began()
    again({"fact": "loss", "value": 2.0})
    again.close()
    assert list(curve(store, "r", "loss")) == [1.0, 2.0]
    assert list(curve(store, "r", "loss").index) == [0, 1]


def test_an_existing_run_is_refused_unless_resumed(store, steps):
    with Recorder(store, run="r") as recorder:
        record(recorder, steps[:5])
    with pytest.raises(SomatizeValueError, match="resume=True"):
        Recorder(store, run="r")
    with Recorder(store, run="r", resume=True) as recorder:
        record(recorder, steps[5:8])
    assert facts(store, "r", forward=6) == steps[6]
    assert len(forwards(store, "r")) == 8


def test_a_closed_recorder_refuses_a_new_forward(store):
    recorder = Recorder(store, run="r")
    recorder.close()
    with pytest.raises(SomatizeValueError, match="closed"):
        recorder.forward_began()


WRITER = """
import sys, time
from somatize import Recorder
r = Recorder(sys.argv[1], run="r")
for i in range(100):
    r.forward_began(); r({"fact": "finished", "took_us": i})
print("ready", flush=True)
sys.stdin.readline()
"""


def test_another_process_sees_facts_without_being_told(tmp_path):
    # No flush() in the writer: its background flusher must hand them over.
    path = tmp_path / "store"
    Store(path)
    with subprocess.Popen([sys.executable, "-c", WRITER, str(path)],
                          stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) as writer:
        assert writer.stdout.readline() == "ready\n"
        probe = textwrap.dedent(
            """
            import sys, time
            from somatize.record import facts
            for _ in range(200):
                try:
                    if len(facts(sys.argv[1], "r")) == 100: print("seen"); break
                except KeyError: pass
                time.sleep(0.05)
            """
        )
        seen = subprocess.run([sys.executable, "-c", probe, str(path)], capture_output=True, text=True, check=True)
        assert seen.stdout == "seen\n"
        with pytest.raises(SomatizeValueError, match=f"pid {writer.pid}"):
            Recorder(path, run="r")
        writer.stdin.close()
        writer.wait(10)
    row = runs(path).set_index("run").loc["r"]  # nobody closed it: the exit marked it
    assert (row["state"], row["cause"]) == ("interrupted", EXITED)


def test_a_run_whose_process_died_reads_interrupted(tmp_path):
    path = tmp_path / "store"
    code = ("import os, sys\nfrom somatize import Recorder\nr = Recorder(sys.argv[1], run='r')\n"
            "r.forward_began(); r({'fact': 'updated'}); r.flush()\nos._exit(3)")
    assert subprocess.run([sys.executable, "-c", code, str(path)]).returncode == 3
    assert runs(path).set_index("run").loc["r", "state"] == "interrupted"
    assert facts(path, "r", forward=0) == [{"fact": "updated"}]


class Twice(Node):
    def forward(self, x, ctx):
        ctx.fact("seen", value=x)
        return 2 * x


def test_a_recorder_watching_a_graph_keeps_what_the_engine_said(store):
    g = Graph.somatize(Twice().named("a") >> Twice().named("b"))
    heard = []
    recorder = Recorder(store, run="g")
    for x in range(4):
        before = len(heard)
        g.forward(x, watching=[recorder, heard.append])
        assert facts(store, "g", forward=x) == heard[before:]
    assert list(curve(store, "g", "seen/b")) == [0.0, 2.0, 4.0, 6.0]
    assert list(nodes(store, "g")["ran"]) == [4, 4]
    recorder.close()


def test_a_node_time_that_is_not_a_number_is_counted_not_timed(store):
    with Recorder(store, run="r") as recorder:
        recorder.forward_began()
        recorder({"fact": "ran", "node": "a", "took_us": 5})
        recorder({"fact": "ran", "node": "a", "took_us": None})
        recorder({"fact": "ran", "node": "a", "took_us": 7})
    row = nodes(store, "r").set_index("node").loc["a"]
    assert (row["ran"], row["total_us"], row["max_us"]) == (3, 12, 7)


def test_a_with_block_that_raised_leaves_the_run_interrupted(store):
    with pytest.raises(ZeroDivisionError):
        with Recorder(store, run="r") as recorder:
            recorder.forward_began()
            recorder({"fact": "finished", "took_us": 1})
            raise ZeroDivisionError("the block fails")
    assert runs(store).set_index("run").loc["r", "state"] == "interrupted"
    assert facts(store, "r", forward=0) == [{"fact": "finished", "took_us": 1}]


@pytest.fixture
def no_background_flush(monkeypatch):
    """The flusher thread idles: whatever the query sees, it read from memory."""
    from somatize.record import _flusher

    monkeypatch.setattr(_flusher, "flush_all", lambda: None)


QUERIES = {
    "facts": lambda store: facts(store, "r", forward=2)[1:] == [{"fact": "finished", "took_us": 2},
                                                                 {"fact": "loss", "value": 0.5}],
    "forwards": lambda store: list(forwards(store, "r")["took_us"]) == [0, 1, 2],
    "curve": lambda store: list(curve(store, "r", "loss")) == [0.5, 0.5, 0.5],
    "nodes": lambda store: nodes(store, "r").set_index("node").loc["body", "ran"] == 3,
    "runs": lambda store: runs(store).set_index("run").loc["r", "forwards"] == 3,
}


@pytest.mark.parametrize("query", QUERIES)
def test_every_query_in_this_process_sees_every_fact_so_far_and_writes_nothing(store, no_background_flush, query):
    """Reads are pure: the pending facts come from memory, no flush is forced."""
    recorder = Recorder(store, run="r")
    recorder.forward_began()
    recorder({"fact": "ran", "node": "body", "began_us": 0, "took_us": 1})
    recorder({"fact": "finished", "took_us": 0})
    recorder({"fact": "loss", "value": 0.5})
    recorder.flush()  # forward 0 on disk, forwards 1 and 2 only in memory
    for i in (1, 2):
        recorder.forward_began()
        recorder({"fact": "ran", "node": "body", "began_us": 0, "took_us": 1})
        recorder({"fact": "finished", "took_us": i})
        recorder({"fact": "loss", "value": 0.5})
    folder = store.path / "runs" / "r"
    before = {p.name: p.read_bytes() for p in [*folder.iterdir(), *(folder / "series").iterdir()] if p.is_file()}
    assert b'"facts":3' in before["summary.json"]
    assert QUERIES[query](store)
    after = {p.name: p.read_bytes() for p in [*folder.iterdir(), *(folder / "series").iterdir()] if p.is_file()}
    assert after == before  # the query wrote nothing
    recorder.close()


class Refuse:
    """A watcher that fails on the first fact of a kind, as a full disk would."""

    def __init__(self, kind):
        self.kind = kind

    def __call__(self, fact):
        if fact["fact"] == self.kind:
            raise OSError("no space left on device")


@pytest.mark.parametrize("recorder_first", [True, False])
def test_a_raising_watcher_leaves_the_record_with_everything_before(store, recorder_first):
    g = Graph.somatize(Twice().named("a") >> Twice().named("b"))
    recorder = Recorder(store, run="r")
    heard = []
    g.forward(1, watching=[recorder, heard.append])  # forward 0: whole
    refuse = Refuse("finished")
    watching = [recorder, heard.append, refuse] if recorder_first else [refuse, recorder, heard.append]
    with pytest.raises(WatcherError, match="Refuse.*no space left on device") as e:
        g.forward(2, watching=watching)
    assert "take it out of watching=" in str(e.value)
    g.forward(3, watching=[recorder, heard.append])  # the record goes on
    recorder.close()
    said = facts(store, "r")
    assert said == heard  # the recorder kept every fact it was handed, in order
    by_forward = [facts(store, "r", forward=n) for n in range(3)]
    finished = ["finished"] if recorder_first else []
    assert [f["fact"] for f in by_forward[1]] == ["seen", "ran", "seen", "ran"] + finished
    assert by_forward[2][-1]["fact"] == "finished" and by_forward[0][-1]["fact"] == "finished"
    assert runs(store).set_index("run").loc["r", "state"] == "finished"


def test_a_run_without_facts_yet_reads_empty(store):
    recorder = Recorder(store, run="r", summarising=["loss"])
    assert facts(store, "r") == []
    assert len(forwards(store, "r")) == 0 and len(nodes(store, "r")) == 0
    assert runs(store).set_index("run").loc["r", "forwards"] == 0
    with pytest.raises(SomatizeValueError, match="no forwards yet"):
        facts(store, "r", forward=0)
    recorder.close()


def test_a_fact_name_too_long_for_a_file_is_kept_in_the_log_and_breaks_nothing(store):
    long = "é" * 90  # 180 bytes, 540 when quoted into a file name
    with Recorder(store, run="r") as recorder:
        for i in range(3):
            recorder.forward_began()
            recorder({"fact": long, "value": float(i)})
            recorder({"fact": "loss", "value": float(i)})
    assert [f["fact"] for f in facts(store, "r", forward=2)] == [long, "loss"]
    assert list(curve(store, "r", "loss")) == [0.0, 1.0, 2.0]
    with Recorder(store, run="r", resume=True) as again:
        again.forward_began()
        again({"fact": "loss", "value": 3.0})
    assert list(curve(store, "r", "loss")) == [0.0, 1.0, 2.0, 3.0]


@pytest.mark.parametrize("bad", [[1], [""], 3, [None]])
def test_summarising_must_name_facts_and_nothing_is_written_before_it_is_checked(tmp_path, bad):
    with pytest.raises(TypeError, match=r"summarising=\['loss'\]"):
        Recorder(tmp_path / "s", run="r", summarising=bad)
    assert not (tmp_path / "s" / "runs" / "r").exists()


def deep(n):
    value = 0
    for _ in range(n):
        value = {"d": value}
    return value


UNENCODABLE = {"big": 2**64, "small": -(2**63) - 1, "deep": deep(300)}


@pytest.mark.parametrize("field", UNENCODABLE)
def test_a_fact_orjson_cannot_encode_is_kept_as_its_text_and_the_record_goes_on(tmp_path, field):
    """One unencodable field never stops the record: it is kept as its str,
    the facts around it are kept as they are, and another process sees all."""
    path = tmp_path / "store"
    recorder = Recorder(Store(path), run="r")
    recorder.forward_began()
    recorder({"fact": "before", "i": 1})
    recorder({"fact": "seed", "node": "n", field: UNENCODABLE[field]})
    recorder({"fact": "after", "i": 2})
    recorder.flush()
    for i in range(3):
        recorder.forward_began()
        recorder({"fact": "later", "i": i})
    recorder.flush()
    seen = subprocess.run(
        [sys.executable, "-c",
         "import sys, json\nfrom somatize.record import facts\nprint(json.dumps(facts(sys.argv[1], 'r')))",
         str(path)],
        capture_output=True, text=True, check=True,
    )
    import json

    said = json.loads(seen.stdout)
    assert [f["fact"] for f in said] == ["before", "seed", "after", "later", "later", "later"]
    assert said[1]["fact"] == "seed" and said[1]["node"] == "n"
    kept = said[1][field]
    if field == "deep":  # nested as deep as JSON goes, the rest as its text
        levels = 0
        while isinstance(kept, dict):
            kept, levels = kept["d"], levels + 1
        assert 100 <= levels < 254 and kept == str(deep(300 - levels))
    else:
        assert kept == str(UNENCODABLE[field])
    recorder.close()


def test_a_numeric_value_past_64_bits_is_a_curve_point_and_a_fact_as_text(store):
    with Recorder(store, run="r") as recorder:
        recorder.forward_began()
        recorder({"fact": "seed", "value": 2**64})
        recorder.forward_began()
        recorder({"fact": "seed", "value": 10**400})  # past a float64: the curve says inf
    assert list(curve(store, "r", "seed")) == [float(2**64), float("inf")]
    assert facts(store, "r", forward=0) == [{"fact": "seed", "value": str(2**64)}]


def test_the_flusher_leaves_a_recorder_younger_than_a_round_to_its_next_round(store):
    """A run shorter than FLUSH_EVERY is written once, by its close: the
    flusher's round skips a Recorder made less than FLUSH_EVERY before it,
    and flushes it from then on. The young one's birth is set an hour ahead
    of the real clock, so the real flusher thread leaves it alone while the
    test drives the rounds."""
    import time

    import orjson

    from somatize.record import _flusher

    def on_disk(run):  # what another process reads
        return orjson.loads((store.path / "runs" / run / "summary.json").read_bytes())["forwards"]

    young, old = Recorder(store, run="young"), Recorder(store, run="old")
    for r in (young, old):
        r.forward_began()
        r({"fact": "loss", "value": 1.0})
    born = young._born = time.monotonic() + 3600
    old._born = born - _flusher.FLUSH_EVERY  # a round older
    _flusher.flush_all(now=born + _flusher.FLUSH_EVERY * 0.99)
    assert (on_disk("young"), on_disk("old")) == (0, 1)
    _flusher.flush_all(now=born + _flusher.FLUSH_EVERY)
    assert on_disk("young") == 1
    young.close()
    old.close()


def test_a_flush_that_cannot_write_is_raised_at_the_next_fact_handed_over(store):
    """A failed background flush is never retried in silence: the owner hears
    of it at its next call (here: the next fact), and close() says it too."""
    from somatize._base.errors import DamagedError
    from somatize.record import _flusher

    recorder = Recorder(store, run="r")
    recorder.forward_began()
    recorder({"fact": "loss", "value": 1.0})
    recorder.flush()
    # a folder where the next series file must go: its open fails, as a full disk would
    (store.path / "runs" / "r" / "series" / "energy.bin").mkdir()
    recorder.forward_began()
    recorder({"fact": "energy", "value": 2.0})
    _flusher.flush_all(now=math.inf)  # the background flusher's own call: it must not swallow this for good
    with pytest.raises(DamagedError, match=r"run 'r' stopped.*energy.bin.*resume=True"):
        recorder({"fact": "loss", "value": 3.0})
    with pytest.raises(DamagedError, match="stopped"):
        recorder.flush()
    with pytest.raises(DamagedError, match="stopped"):
        recorder.close()
    assert list(curve(store, "r", "loss")) == [1.0]  # what the last completed flush wrote


def test_recorders_without_a_run_name_get_distinct_names_that_sort_by_time(store):
    first, second = Recorder(store), Recorder(store)
    assert first.run != second.run
    assert first.run.startswith("run-") and first.run[4:12].isdigit()
    assert first.run in repr(first)
    first.close()
    second.close()
    assert set(runs(store)["run"]) == {first.run, second.run}


def test_a_run_name_too_long_for_a_folder_is_refused_with_our_error(store):
    with pytest.raises(SomatizeValueError, match="at most 200"):
        Recorder(store, run="r" * 256)
    with pytest.raises(SomatizeValueError, match="at most 200"):
        facts(store, "r" * 256)


def test_a_curve_name_that_is_not_a_str_is_our_type_error_naming_it(store):
    from somatize._base.errors import SomatizeTypeError

    Recorder(store, run="r").close()
    with pytest.raises(SomatizeTypeError, match=r"name.*\"loss\".*int 5"):
        curve(store, "r", 5)
    with pytest.raises(SomatizeTypeError, match="run="):
        facts(store, 5)


def test_nodes_counts_calls_as_ran_plus_recalled(store):
    with Recorder(store, run="r") as recorder:
        for kind in ("ran", "recalled", "recalled"):
            recorder.forward_began()
            recorder({"fact": kind, "node": "a", "began_us": 0, "took_us": 4})
    row = nodes(store, "r").set_index("node").loc["a"]
    assert (row["calls"], row["ran"], row["recalled"], row["mean_us"]) == (3, 1, 2, 4.0)
    assert "forwards" not in nodes(store, "r")


@pytest.mark.parametrize("took", [2**70, float("nan"), float("inf")])
def test_a_node_time_json_cannot_hold_keeps_the_summary_readable(store, took):
    with Recorder(store, run="r") as recorder:
        recorder.forward_began()
        recorder({"fact": "ran", "node": "a", "began_us": 0, "took_us": took})
        recorder({"fact": "ran", "node": "a", "began_us": 0, "took_us": 5})
    assert runs(store).set_index("run").loc["r", "state"] == "finished"
    assert nodes(store, "r").set_index("node").loc["a", "calls"] == 2


def test_a_run_whose_first_loss_was_infinite_resumes_and_summarises_on(store):
    with Recorder(store, run="r") as recorder:
        recorder.forward_began()
        recorder({"fact": "loss", "value": float("inf")})
    with Recorder(store, run="r", resume=True) as recorder:
        recorder.forward_began()
        recorder({"fact": "loss", "value": 0.5})
    row = runs(store).set_index("run").loc["r"]
    assert (row["state"], row["loss.last"], row["loss.min"]) == ("finished", 0.5, 0.5)


def test_facts_before_the_first_forward_belong_to_forward_0_with_it_and_shift_no_forward(tmp_path):
    """They made a forward of their own: the first forward was numbered 1 (an
    evaluation before training, or the instruments' first facts, shifted every forward)."""
    with Recorder(tmp_path, run="r") as rec:
        rec({"fact": "val_loss", "value": 2.0})
        for i in range(3):
            rec.forward_began()
            rec({"fact": "finished", "took_us": 5})
            rec({"fact": "loss", "value": float(i)})
        assert rec.forwards == 3  # read from memory, before any flush
    assert [f["fact"] for f in facts(tmp_path, run="r", forward=0)] == ["val_loss", "finished", "loss"]
    assert curve(tmp_path, run="r").to_dict() == {0: 0.0, 1: 1.0, 2: 2.0}
    assert len(forwards(tmp_path, run="r")) == 3
