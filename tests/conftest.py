"""The order files run in (the slowest first), and the Trainer's reads by
count only (below).

scripts/test runs the suite on several processes (pytest-xdist with
``--dist loadfile``: a file's tests stay on one process, in file order,
sharing its module fixtures). Files are handed out in collection order, so a
long file collected late would run alone at the end while the other
processes sit idle; these start first. The order within a file is kept.
"""

import sys

import pytest

SLOW_FIRST = ("test_ship.py", "test_binder.py", "test_browser.py", "test_sidebar.py", "test_bench.py")


def pytest_collection_modifyitems(items):
    rank = {name: i for i, name in enumerate(SLOW_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(SLOW_FIRST)))  # stable: a file's order is kept


# The Trainer reads the losses off the device every read_every steps, and
# also by time (0.25 s after the last read), and a step says its clocks by
# time too (1 s after the last): on a busy machine a step that stalls would
# move a read or a clock to another step than a test expects. Tests run with
# both bounds out of the way; a test of the reads by time sets them itself
# and drives the Trainer's clock (test_trainer_real: ..._read_by_time_...).
# Recorder.log keeps the same two rules (record/_logged.py; test_log drives
# its clock). The modules are patched only where a test file has imported them.
@pytest.fixture(autouse=True)
def _trainer_reads_by_count_only(monkeypatch):
    reading = sys.modules.get("somatize.torch._reading")
    if reading is not None:
        monkeypatch.setattr(reading, "READ_AT_MOST_NS", 10**15)
    trainer = sys.modules.get("somatize.torch._trainer")
    if trainer is not None:
        monkeypatch.setattr(trainer, "CLOCKS_AT_MOST_NS", 10**15)
    logged = sys.modules.get("somatize.record._logged")
    if logged is not None:
        monkeypatch.setattr(logged, "READ_AT_MOST_NS", 10**15)
        monkeypatch.setattr(logged, "CLOCKS_AT_MOST_NS", 10**15)


# A real S3 server (moto) on 127.0.0.1 for the bucket stores, started once per
# process and only for the tests that ask for it (tests/buckets.py).
from buckets import moto_endpoint, s3_url  # noqa: E402, F401
