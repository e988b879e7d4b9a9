"""Many runs on real worker processes, into one store: a Dask LocalCluster
(two worker processes) and a ProcessPoolExecutor; somatize knows nothing of
either. Every cluster is shut down by its context manager, also when a test
fails. Nothing here waits on a clock: a worker is killed by its own task,
at a given step."""

import concurrent.futures
import contextlib
import io
import multiprocessing

import dask
import pytest
import torch
from distributed import Client, KilledWorker, LocalCluster, progress

from somatize import Store
from somatize.cli import check_report
from somatize.record import curve, facts, runs

from many_tasks import STEPS, record, train


@contextlib.contextmanager
def dask_client(**config):
    # dashboard_address=":0": no fixed port to find taken (a notebook's own cluster may hold 8787)
    with dask.config.set(config), LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                               dashboard_address=":0") as cluster, Client(cluster) as client:
        yield client


def clean(path):
    report, ok = check_report(path)
    assert ok, report


def same_curve(path, run, reference):
    got = curve(path, run, "loss")
    want = curve(path, reference, "loss")
    assert list(got.index) == list(range(STEPS))  # each step once, in order
    assert list(got) == list(want)


def same_final(path, run, reference):
    store = Store(path)
    got, want = store.recall(f"{run}/final"), store.recall(f"{reference}/final")
    for node in want:
        for k in want[node]:
            torch.testing.assert_close(got[node][k], want[node][k], atol=1e-12, rtol=0)


def test_eight_runs_on_two_dask_workers_land_whole_in_one_store(tmp_path):
    path = str(tmp_path / "store")
    Store(path)
    names = [f"run-{i}" for i in range(8)]
    with dask_client() as client:
        futures = client.map(record, [path] * 8, names)
        shown = io.StringIO()
        with contextlib.redirect_stdout(shown):
            progress(futures, notebook=False)  # Dask's own progress bar, as a user watches a sweep
        assert client.gather(futures) == names
    table = runs(path).set_index("run")
    assert sorted(table.index) == names
    assert (table["state"] == "finished").all() and (table["forwards"] == 200).all()
    assert list(table["config.run"]) == list(table.index)
    for name in names:
        assert list(curve(path, name, "loss")) == [float(i) for i in range(200)]
        notes = [f["text"] for f in facts(path, name) if f["fact"] == "note"]
        assert notes == [f"{name}:{i}" for i in range(200)]  # nothing lost, nothing from another run
    clean(path)


def test_a_worker_killed_mid_run_leaves_the_store_clean_and_the_run_interrupted_then_resumable(tmp_path):
    """With Dask told not to retry, the kill shows: the run lists as
    interrupted with every fact flushed before the kill, the other runs
    finish, the store checks clean. Submitted again, the task resumes from
    the state it kept (at step 20) and ends as a run never stopped."""
    path = str(tmp_path / "store")
    Store(path)
    with dask_client(**{"distributed.scheduler.allowed-failures": 0}) as client:
        one, other = sorted(client.scheduler_info()["workers"])  # the kill fails what its worker holds: only it
        killed = client.submit(train, path, "killed", 0.01, kill_at=25, workers=[one])
        others = client.map(train, [path] * 2, ["reference", "b"], [0.01, 0.02], workers=[other])
        with pytest.raises(KilledWorker):
            killed.result()
        assert [r["run"] for r in client.gather(others)] == ["reference", "b"]

        table = runs(path).set_index("run")
        assert table.loc["killed", "state"] == "interrupted"
        assert table.loc["killed", "forwards"] == 25  # flushed just before the kill: all there
        assert list(curve(path, "killed", "loss")) == list(curve(path, "reference", "loss"))[:25]
        assert (table.loc[["reference", "b"], "state"] == "finished").all()
        clean(path)

        again = client.submit(train, path, "killed", 0.01, kill_at=25, pure=False).result()
    assert again["run"] == "killed"
    assert runs(path).set_index("run").loc["killed", "state"] == "finished"
    same_curve(path, "killed", "reference")
    same_final(path, "killed", "reference")
    clean(path)


def test_dask_retries_a_lost_task_which_resumes_and_a_finished_task_it_reruns_returns_its_result(tmp_path):
    """Dask's own retry (allowed-failures is 3 by default) runs the killed
    task again: it resumes. A finished task whose result lived on the killed
    worker is run again too (its future is still held): written as in
    many_tasks.train, it finds its run finished and returns the same."""
    path = str(tmp_path / "store")
    Store(path)
    with dask_client() as client:
        first = sorted(client.scheduler_info()["workers"])[0]
        done = client.submit(train, path, "reference", 0.01, workers=[first], allow_other_workers=True)
        before = done.result()
        killer = client.submit(train, path, "killed", 0.01, kill_at=25, workers=[first], allow_other_workers=True)
        assert killer.result()["run"] == "killed"
        after = done.result()  # computed again on a worker that still lives
    assert after["pid"] != before["pid"]
    assert {k: v for k, v in after.items() if k != "pid"} == {k: v for k, v in before.items() if k != "pid"}
    table = runs(path).set_index("run")
    assert (table["state"] == "finished").all() and (table["forwards"] == STEPS).all()
    same_curve(path, "killed", "reference")
    same_final(path, "killed", "reference")
    clean(path)


def test_a_process_pool_runs_the_same_sweep_with_the_same_results_as_a_for_loop(tmp_path):
    """Nothing is Dask-specific: concurrent.futures does the same."""
    lrs = [0.01, 0.02, 0.03]
    pooled, looped = str(tmp_path / "pooled"), str(tmp_path / "looped")
    Store(pooled)
    with concurrent.futures.ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("spawn")) as pool:
        got = list(pool.map(train, [pooled] * len(lrs), [f"lr-{lr}" for lr in lrs], lrs))
    want = [train(looped, f"lr-{lr}", lr) for lr in lrs]
    assert [(g["run"], g["final"], g["loss"]) for g in got] == [(w["run"], w["final"], w["loss"]) for w in want]
    table = runs(pooled).set_index("run")
    assert list(table["config.lr"]) == lrs and (table["state"] == "finished").all()
    clean(pooled)
