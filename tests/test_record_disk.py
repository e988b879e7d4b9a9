"""The record on disk: damage is found and named, a torn tail is not damage,
and resuming cuts back to the last completed flush without losing a whole block."""

import numpy as np
import orjson
import pytest

from somatize import Recorder, Store
from somatize._base.errors import DamagedError
from somatize.record import _log
from somatize.record._check import check_run
from somatize.record import curve, facts, forwards, runs


def read_index(path):
    return np.frombuffer(path.read_bytes(), _log.INDEX)


def fill(store, run, n, start=0, resume=False):
    with Recorder(store, run=run, resume=resume) as recorder:
        for i in range(start, start + n):
            recorder.forward_began()
            recorder({"fact": "finished", "took_us": i})
            recorder({"fact": "loss", "value": i / 10})
            if i % 50 == 49:
                recorder.flush()  # several flushes, several index appends
    return store.path / "runs" / run


@pytest.fixture
def store(tmp_path):
    return Store(tmp_path / "store")


def test_a_clean_run_checks_clean(store):
    folder = fill(store, "r", 2000)
    assert check_run(folder) == ([], [])


def test_chopped_log_still_lists_reads_before_the_damage_and_is_reported(store):
    folder = fill(store, "r", 2000)
    log = folder / "facts.log"
    size = log.stat().st_size
    with open(log, "r+b") as f:
        f.truncate(size - 100)
    assert runs(store).set_index("run").loc["r", "forwards"] == 2000
    index = read_index(folder / "index.bin")
    last_block = index[-1]
    assert facts(store, "r", forward=int(last_block["first"]) - 1) != []
    with pytest.raises(DamagedError, match=f"byte {last_block['offset']}"):
        facts(store, "r", forward=1999)
    problems, _ = check_run(folder)
    assert len(problems) == 1 and f"byte {last_block['offset']}" in problems[0] and "'r'" in problems[0]


def test_a_flipped_byte_is_damage_at_its_block(store):
    folder = fill(store, "r", 2000)
    index = read_index(folder / "index.bin")
    victim = index[1]
    with open(folder / "facts.log", "r+b") as f:
        f.seek(int(victim["offset"]) + 40)
        byte = f.read(1)
        f.seek(-1, 1)
        f.write(bytes([byte[0] ^ 0xFF]))
    problems, _ = check_run(folder)
    assert len(problems) == 1 and f"byte {victim['offset']}" in problems[0]
    assert len(facts(store, "r", forward=int(victim["first"]) - 1)) == 2
    with pytest.raises(DamagedError):
        facts(store, "r", forward=int(victim["first"]) + 1)
    with pytest.raises(DamagedError):
        facts(store, "r")


def test_every_damaged_block_is_reported_and_the_others_still_read(store):
    folder = fill(store, "r", 2000)
    index = read_index(folder / "index.bin")
    victims = [index[1], index[len(index) // 2]]
    with open(folder / "facts.log", "r+b") as f:
        for victim in victims:
            f.seek(int(victim["offset"]) + 40)
            byte = f.read(1)
            f.seek(-1, 1)
            f.write(bytes([byte[0] ^ 0xFF]))
    problems, _ = check_run(folder)
    assert len(problems) == 1 and "2 block(s)" in problems[0]
    assert all(f"byte {v['offset']}" in problems[0] for v in victims)
    after = int(index[-1]["last"])  # past both damaged blocks
    assert [f["fact"] for f in facts(store, "r", forward=after)] == ["finished", "loss"]


def torn_tail(folder, forward, cut):
    """What a kill leaves mid-flush: a block past the last completed flush."""
    data, _ = _log.encode_blocks([(forward, [{"fact": "finished", "took_us": -1}])])
    with open(folder / "facts.log", "ab") as f:
        f.write(data[: cut or len(data)])
    return data


def test_a_torn_tail_is_a_note_not_damage(store):
    folder = fill(store, "r", 300)
    torn_tail(folder, 300, cut=20)
    problems, notes = check_run(folder)
    assert problems == [] and len(notes) == 1 and "torn" in notes[0]
    assert len(facts(store, "r")) == 600


def test_resume_cuts_a_torn_tail_and_goes_on(store):
    folder = fill(store, "r", 300)
    torn_tail(folder, 300, cut=20)
    fill(store, "r", 10, start=300, resume=True)
    assert check_run(folder) == ([], [])
    assert [f["took_us"] for f in facts(store, "r") if f["fact"] == "finished"] == list(range(310))


def test_resume_keeps_a_whole_block_written_by_an_unfinished_flush(store):
    folder = fill(store, "r", 300)
    torn_tail(folder, 300, cut=None)  # whole, but the summary never counted it
    assert facts(store, "r", forward=300) == [{"fact": "finished", "took_us": -1}]
    fill(store, "r", 5, start=301, resume=True)
    assert check_run(folder) == ([], [])
    took = forwards(store, "r")["took_us"]
    assert list(took[299:303]) == [299, -1, 301, 302]


def test_resume_keeps_the_whole_block_before_a_torn_one(store):
    folder = fill(store, "r", 300)
    torn_tail(folder, 300, cut=None)  # a whole block of the interrupted flush
    torn_tail(folder, 301, cut=20)  # and the next, torn by the kill
    fill(store, "r", 2, start=302, resume=True)
    assert check_run(folder) == ([], [])
    assert list(forwards(store, "r")["took_us"][299:304]) == [299, -1, 302, 303]


def test_resume_cuts_series_back_to_the_last_completed_flush(store):
    folder = fill(store, "r", 100)
    with open(_log.series_file(folder / "series", "loss"), "ab") as f:
        f.write(_log.points_bytes([100], [99.0]) + b"\x01\x02\x03")  # a flush cut after the log
    assert len(curve(store, "r", "loss")) == 100  # only what a completed flush wrote is read
    fill(store, "r", 1, start=100, resume=True)
    assert list(curve(store, "r", "loss").iloc[-2:]) == [9.9, 10.0]


def test_a_summary_that_does_not_parse_is_damage(store):
    folder = fill(store, "r", 10)
    (folder / "summary.json").write_bytes(b"{not json")
    problems, _ = check_run(folder)
    assert problems and "summary.json" in problems[0]


def test_a_cut_series_is_damage(store):
    folder = fill(store, "r", 100)
    path = _log.series_file(folder / "series", "loss")
    with open(path, "r+b") as f:
        f.truncate(16 * 50)
    problems, _ = check_run(folder)
    assert problems and "series 'loss'" in problems[0]


def test_the_index_is_not_needed_to_read(store):
    folder = fill(store, "r", 1000)
    (folder / "index.bin").unlink()
    assert facts(store, "r", forward=777) == [{"fact": "finished", "took_us": 777}, {"fact": "loss", "value": 77.7}]


def test_a_block_holds_at_most_its_share_and_a_forward_may_span_two(store):
    big = [{"fact": "x", "i": i} for i in range(_log.BLOCK_FACTS + 10)]
    with Recorder(store, run="big") as recorder:
        recorder.forward_began()
        recorder({"fact": "small"})
        recorder.forward_began()
        for fact in big:
            recorder(fact)
    index = read_index(store.path / "runs" / "big" / "index.bin")
    assert len(index) == 2 and list(index["last"]) == [1, 1]
    assert facts(store, "big", forward=1) == big
    summary = orjson.loads((store.path / "runs" / "big" / "summary.json").read_bytes())
    assert summary["facts"] == len(big) + 1 and np.all(index["length"] > 0)
