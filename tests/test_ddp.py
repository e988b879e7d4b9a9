"""Data parallel on real gloo ranks (real forked processes, each process
group with a timeout): N ranks each given 1/N of every batch equal one
process given the whole batch, which a hand-written torch loop (the oracle)
trains; weights bitwise equal across ranks after every update; a job killed
and relaunched equals one never stopped; a rank lost is named."""

import copy
import math
import re

import pytest
import torch

import somatize
from somatize import Store
from somatize.cli import check_report
from somatize.record import curve, runs
from somatize.torch import launch

import ddp_tasks
from torch_models import batches, built

TIMEOUT_S = 30


def oracle(every, clip, scheduled):
    """A plain torch loop: one update per group of `every` whole batches, on their concatenation."""
    g = built(seed=100, dtype=torch.float64)
    net = torch.nn.Sequential(copy.deepcopy(g.node("body").net), copy.deepcopy(g.node("head").out))
    opt = torch.optim.Adam(net.parameters(), lr=1e-2)
    sched = ddp_tasks.schedule_of(opt, scheduled)
    data = batches(ddp_tasks.STEPS, n=ddp_tasks.BATCH, dtype=torch.float64)
    losses = []
    for at in range(0, len(data), every):
        group = data[at:at + every]
        with torch.no_grad():
            losses += [float(ddp_tasks.MSE(net(x), y)) for x, y in group]
        x, y = torch.cat([b[0] for b in group]), torch.cat([b[1] for b in group])
        ddp_tasks.MSE(net(x), y).backward()
        if clip is not None:
            torch.nn.utils.clip_grad_norm_(list(net.parameters()), clip)
        opt.step()
        opt.zero_grad()
        if sched is not None:
            sched.step()
    return torch.cat([p.detach().reshape(-1) for p in net.parameters()]), losses


CASES = {"plain": (1, 1, None, False), "every=3": (3, 1, None, False), "micro=2": (1, 2, None, False),
         "every=2,micro=2": (2, 2, None, False), "clip": (1, 1, 0.05, False), "schedule": (2, 1, None, True)}


@pytest.mark.parametrize("nprocs", [2, 3])
@pytest.mark.parametrize("case", list(CASES))
def test_ranks_given_shares_of_each_batch_train_as_one_process_on_the_whole_batch(case, nprocs):
    every, micro, clip, scheduled = CASES[case]
    got = launch(ddp_tasks.shares, every, micro, clip, scheduled, nprocs=nprocs, timeout_s=TIMEOUT_S)
    want, losses = oracle(every, clip, scheduled)
    assert got["updates"] == -(-ddp_tasks.STEPS // every)
    assert got["same"] == [True] * got["updates"]  # bitwise, after every update
    assert (torch.tensor(got["weights"], dtype=torch.float64) - want).abs().max().item() <= 1e-9
    # the loss each step says is the mean over every rank's examples, not rank 0's
    assert max(abs(a - b) for a, b in zip(got["losses"], losses)) <= 1e-9


def test_a_job_killed_and_relaunched_on_as_many_ranks_equals_one_never_stopped(tmp_path):
    whole = launch(ddp_tasks.resumed, str(tmp_path / "whole"), nprocs=2, timeout_s=TIMEOUT_S)
    store = str(tmp_path / "killed")
    with pytest.raises(somatize.RankLost) as lost:
        launch(ddp_tasks.resumed, store, 8, nprocs=2, timeout_s=TIMEOUT_S)
    assert lost.value.lost == 0 and "rank 0 of 2" in str(lost.value) and "SIGKILL" in str(lost.value)
    again = launch(ddp_tasks.resumed, store, nprocs=2, timeout_s=TIMEOUT_S)
    assert again["recording"] is True
    diff = torch.tensor(again["weights"], dtype=torch.float64) - torch.tensor(whole["weights"], dtype=torch.float64)
    assert diff.abs().max().item() <= 1e-12
    table = runs(store)
    assert list(table["run"]) == ["ddp"] and table.loc[0, "state"] == "finished"
    assert table.loc[0, "forwards"] == 12  # one run, every step once, whatever rank 1 did
    report, clean = check_report(store)
    assert clean, report


def test_a_rank_killed_mid_run_is_named_and_the_run_lists_interrupted(tmp_path):
    store = str(tmp_path / "s")
    with pytest.raises(somatize.RankLost) as lost:
        launch(ddp_tasks.resumed, store, 5, 1, nprocs=3, timeout_s=TIMEOUT_S)
    assert lost.value.lost == 1
    assert "rank 1 of 3" in str(lost.value) and "SIGKILL" in str(lost.value)
    # the others stopped with the clear error at their next collective, not a hang
    assert "rank 0: RankLost" in str(lost.value) and "rank 2: RankLost" in str(lost.value)
    table = runs(store)
    assert list(table["run"]) == ["ddp"] and table.loc[0, "state"] == "interrupted"
    assert len(curve(store, run="ddp", name="loss")) == 5  # steps 0-4: every fact said before the loss, flushed
    report, clean = check_report(store)  # what `somatize check` says
    assert clean, report


def test_a_rank_that_raises_is_named_with_its_traceback():
    with pytest.raises(somatize.LaunchError) as e:
        launch(ddp_tasks.raises_on, 1, nprocs=2, timeout_s=TIMEOUT_S)
    assert e.value.rank == 1 and "ValueError: a bad batch on this rank" in str(e.value)


@pytest.mark.parametrize("hang", [{1}, {0, 1}], ids=["one rank", "every rank"])
def test_a_rank_that_hangs_before_joining_the_group_is_killed_and_named(monkeypatch, hang):
    """A forked rank can hang before it reaches the group (a lock another
    thread held at the fork): with every rank hung, no collective ever times
    out. The launcher bounds the join (timeout_s + GRACE_S), kills the ranks
    and names the first that never joined. The hang is made where the rank
    sets its threads, just before init_process_group (the forked ranks
    inherit this process's torch.set_num_threads)."""
    import os
    import threading

    from somatize.torch import _launch

    real = torch.set_num_threads

    def hangs_on_some_ranks(n):
        if int(os.environ["RANK"]) in hang:
            threading.Event().wait()  # forever: only the launcher's SIGKILL ends it
        real(n)

    monkeypatch.setattr(torch, "set_num_threads", hangs_on_some_ranks)
    monkeypatch.setattr(_launch, "GRACE_S", 1)
    with pytest.raises(somatize.RankLost, match=r"never joined the process group.*timeout_s=2") as e:
        launch(ddp_tasks.returns_tensor, nprocs=2, timeout_s=2)
    assert e.value.lost == min(hang)


def test_a_rank_that_stops_answering_is_named_with_its_last_step_and_ended_by_the_launcher():
    """Rank 1 hangs before its step 4; rank 0 waits timeout_s for it at the
    update and ends with RankLost. The launcher ended rank 1 only
    timeout_s + GRACE_S later and said it was "killed by SIGKILL", as if
    something else had killed it; now it ends it ENDING_S after rank 0
    ended, and says that it stopped answering, its last step and that the
    launcher ended it."""
    with pytest.raises(somatize.RankLost) as e:
        launch(ddp_tasks.hangs, 4, nprocs=2, timeout_s=5)
    said = str(e.value)
    assert e.value.lost == 1 and "SIGKILL" in said and "killed by" not in said
    assert re.search(r"rank 1 of 2 \(pid \d+\) stopped answering: its last step, step 3, began [\d.]+ s before "
                     r"the launcher ended it\. The other ranks waited timeout_s=5 s for it", said), said
    assert "(rank 0: RankLost); the launcher then ended it (SIGKILL)" in said


def test_the_launcher_ends_the_ranks_left_soon_after_one_ends_with_rank_lost():
    """When a rank ends with RankLost its collective failed (it waited
    timeout_s for a rank, or found one gone): a rank still alive then is
    given ENDING_S to end by itself, not timeout_s more. A rank that ended
    otherwise leaves the others their next collective: timeout_s + GRACE_S."""
    from somatize.torch._launch import ENDING_S, GRACE_S, _deadline

    assert _deadline(60, first_bad=100.0, first_lost=100.0) == 100.0 + ENDING_S < 100.0 + 60
    assert _deadline(60, first_bad=100.0, first_lost=103.0) == 103.0 + ENDING_S
    assert _deadline(60, first_bad=100.0) == 100.0 + 60 + GRACE_S  # a rank that died or raised
    assert _deadline(60, launched=0.0) == 60 + GRACE_S  # a rank not yet in the group
    assert _deadline(60) is None  # every rank in the group, none ended: the collectives' timeout bounds them


def test_rank_0_returning_what_json_cannot_carry_is_refused_naming_the_fix():
    with pytest.raises(somatize.LaunchError, match=r"returned a Tensor.*t\.tolist\(\)"):
        launch(ddp_tasks.returns_tensor, nprocs=2, timeout_s=TIMEOUT_S)


def test_a_script_under_torchrun_trains_unchanged_and_records_one_run_with_each_ranks_time(tmp_path):
    import os
    import subprocess
    import sys

    here = os.path.dirname(__file__)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([os.path.dirname(here), here]), "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node=2",
                           os.path.join(here, "ddp_script.py"), str(tmp_path)],
                          env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "rank 0: recording=True" in done.stdout and "rank 1: recording=False" in done.stdout
    table = runs(str(tmp_path))
    assert list(table["run"]) == ["torchrun"] and table.loc[0, "state"] == "finished"
    assert table.loc[0, "forwards"] == 8
    assert list(curve(str(tmp_path), run="torchrun", name="ranks")) == [2]
    for rank in (0, 1):  # each rank's own time, said on the steps that say their clocks (the first 10 here)
        assert len(curve(str(tmp_path), run="torchrun", name=f"rank_us/rank{rank}")) == 8


def test_a_recorder_made_on_another_rank_than_0_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")  # a data-parallel job's rank: as it should be, nothing said
    rec = somatize.Recorder(str(tmp_path), run="r")
    assert isinstance(rec, somatize.Recorder) and rec.recording is False
    assert "RANK=1" in repr(rec) and "writes nothing" in repr(rec)
    rec({"fact": "loss", "value": 1.0})
    rec.close()
    assert not (tmp_path / "runs").exists()
    monkeypatch.setenv("RANK", "0")
    with somatize.Recorder(str(tmp_path), run="r") as rec:
        assert rec.recording is True


def test_a_recorder_where_rank_is_set_outside_a_data_parallel_job_says_it_writes_nothing(tmp_path, monkeypatch):
    from somatize.record._recorder import _Bystander

    monkeypatch.setenv("RANK", "3")
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    monkeypatch.setattr(_Bystander, "warned", False)
    with pytest.warns(RuntimeWarning, match=r"RANK=3 in this process's environment.*os.environ.pop\('RANK'\)") as said:
        rec = somatize.Recorder(str(tmp_path), run="r")
    assert [w.filename for w in said] == [__file__]  # pointed at the line that made it
    assert rec.recording is False and "RANK=3" in repr(rec)
    somatize.Recorder(str(tmp_path), run="r2").close()  # once a process (a second warning would raise here)
    assert not (tmp_path / "runs").exists()


def record_ranks(store, steps, us_of):
    """A data-parallel run "r" as its rank 0 records it: ``us_of(i)``, each
    rank's own µs in step ``i`` ({rank: µs}, chosen: no clock)."""
    with somatize.Recorder(store, run="r") as rec:
        rec({"fact": "ranks", "value": len(us_of(0))})
        for i in range(steps):
            rec.forward_began()
            rec({"fact": "ran", "node": "body", "began_us": 0, "took_us": 10})
            rec({"fact": "finished", "took_us": 12})
            rec({"fact": "loss", "value": 1.0})
            for rank, us in us_of(i).items():
                rec({"fact": "rank_us", "rank": rank, "value": us})


def test_spent_shows_each_ranks_time_side_by_side_and_names_the_straggler(tmp_path):
    from somatize.record import spent

    store = Store(tmp_path / "s")
    mean = {0: 1000, 1: 1300, 2: 1100}  # each rank's own µs a step
    record_ranks(store, 5, lambda i: {rank: 99_999 if i == 0 else us for rank, us in mean.items()})  # 0: warm-up
    s = spent(store, run="r")
    assert [(r["rank"], r["mean_us"], r["steps"]) for r in s.ranks] == [(0, 1000, 4), (1, 1300, 4), (2, 1100, 4)]
    assert s.straggler["rank"] == 1 and s.straggler["fastest"] == 0 and s.straggler["over_us"] == 300
    said = "rank 1 is the straggler: its steps take 1.3 ms, 300 µs (30%) more than rank 0's"
    assert said in repr(s)
    assert "rank 1 is the straggler" in s.to_html()


@pytest.mark.parametrize("where", ["data", "compute"])
def test_a_rank_slow_at_loading_its_data_or_in_its_step_is_named_the_straggler(tmp_path, where):
    """The rank the others wait for at the update is the straggler, whether
    it is slow in its step (its objective) or before it (its data iterable,
    as a DataLoader slow to load). A rank's time was measured from its
    step's start, so one slow at loading its data was invisible and spent
    named the other rank, whose own steps (here a little longer) were the
    longer. Real ranks: rank 1 sleeps in its data or its objective."""
    from somatize.record import spent
    from somatize.record._ranks import rank_time

    assert launch(ddp_tasks.slow_rank, str(tmp_path), where, nprocs=2, timeout_s=TIMEOUT_S) == 12
    time = rank_time(str(tmp_path), "slow")
    assert [r["rank"] for r in time["ranks"]] == [0, 1] and time["straggler"]["rank"] == 1
    assert time["straggler"]["fastest"] == 0
    said = repr(spent(str(tmp_path), run="slow"))
    assert "rank 1 is the straggler" in said and "the others wait for it at every update" in said
    if where == "data":  # the text says where its time went
        assert "before it began (loading its data" in said


def test_spent_of_a_run_whose_rank_series_is_damaged_shows_the_nodes_and_names_the_damage(tmp_path):
    """spent raised DamagedError for the whole panel when one rank series
    no longer matched its checksum; the ranks are its optional part, so now
    the nodes' times show, no rank is drawn from the damaged bytes, and the
    damage is named (the file, and what to do) in the panel, its picture
    and its text."""
    from somatize.record import spent

    store = Store(tmp_path / "s")
    record_ranks(store, 4, lambda i: {0: 1000, 1: 1001})
    series = tmp_path / "s" / "runs" / "r" / "series" / "rank_us%2Frank1.bin"
    data = bytearray(series.read_bytes())
    data[-1] ^= 0xFF  # its last value's last byte: the checksum the summary holds no longer matches
    series.write_bytes(bytes(data))
    s = spent(store, run="r")
    assert [r["label"] for r in s.rows if r["kind"] == "node"] == ["body"] and s.rows[0]["count"] == 4
    assert s.ranks == [] and s.straggler is None
    assert "rank_us%2Frank1.bin does not verify" in s.ranks_problem
    html = s.to_html()
    assert "smz-ranks-problem" in html and "Not shown:" in html and "rank_us%2Frank1.bin" in html
    assert "ranks not shown:" in repr(s) and "rank_us%2Frank1.bin" in repr(s)
    series.write_bytes(bytes(data[:-1]) + bytes([data[-1] ^ 0xFF]))  # mended: the ranks are back
    assert [r["rank"] for r in spent(store, run="r").ranks] == [0, 1] and spent(store, run="r").ranks_problem is None


def test_fit_over_a_distributed_sampler_killed_mid_epoch_resumes_exactly_and_evaluates_over_every_rank(tmp_path):
    whole = launch(ddp_tasks.fitted, str(tmp_path / "whole"), nprocs=2, timeout_s=TIMEOUT_S)
    assert whole["steps"] == 8  # 48 examples, 24 a rank, 6 a batch, 2 epochs
    # the held-out loss said at the end is over both ranks' shares: the whole held-out set's
    assert abs(whole["val_loss"][-1] - whole["whole"]) <= 1e-12 and len(whole["val_loss"]) == 2
    store = str(tmp_path / "killed")
    with pytest.raises(somatize.RankLost) as lost:
        launch(ddp_tasks.fitted, store, 6, nprocs=2, timeout_s=TIMEOUT_S)  # step 5, in the second epoch
    assert lost.value.lost == 1
    again = launch(ddp_tasks.fitted, store, nprocs=2, timeout_s=TIMEOUT_S)
    diff = torch.tensor(again["weights"], dtype=torch.float64) - torch.tensor(whole["weights"], dtype=torch.float64)
    assert diff.abs().max().item() <= 1e-12
    assert again["val_loss"] == pytest.approx(whole["val_loss"], abs=1e-12)


def test_frozen_nodes_take_no_part_and_must_agree_across_ranks():
    got = launch(ddp_tasks.frozen_body, False, nprocs=2, timeout_s=TIMEOUT_S)
    g = built(seed=0, dtype=torch.float64, frozen_body=True)
    torch.manual_seed(9)
    g.node("head").out.reset_parameters()
    body = torch.cat([p.detach().reshape(-1) for p in g.node("body").parameters()])
    opt = torch.optim.SGD(g.node("head").parameters(), lr=1e-2)
    net = torch.nn.Sequential(g.node("body").net, g.node("head").out)
    for x, y in batches(4, n=ddp_tasks.BATCH, dtype=torch.float64):  # the oracle: the head alone, whole batches
        ddp_tasks.MSE(net(x), y).backward()
        opt.step()
        opt.zero_grad()
    assert torch.equal(torch.tensor(got["body"], dtype=torch.float64), body)  # the frozen body never moved
    want = torch.cat([p.detach().reshape(-1) for p in g.node("head").parameters()])
    assert (torch.tensor(got["weights"], dtype=torch.float64) - want).abs().max().item() <= 1e-9

    refused = launch(ddp_tasks.frozen_body, True, nprocs=2, timeout_s=TIMEOUT_S)
    assert refused["error"] == "SomatizeValueError"
    assert "frozen node(s) ['body'] differ between ranks: rank(s) [1]" in refused["message"]


@pytest.mark.parametrize("every", [1, 2])
def test_a_data_parallel_step_reads_nothing_off_the_device_but_the_bulk_read(tmp_path, every):
    per_step = launch(ddp_tasks.host_syncs, str(tmp_path), every, nprocs=2, timeout_s=TIMEOUT_S)
    assert per_step[:15] == [0] * 15  # the all-reduce's loss and ranks' clocks stay tensors until the read
    assert per_step[15] == 1  # the 16th step's end reads the losses and the clocks held, in one go
    clocks = curve(str(tmp_path), run="syncs", name="rank_us/rank1")  # rank 1's time, read off in bulk too
    assert len(clocks) >= 11 and (clocks > 0).all()  # steps 0-9 and 20 say their clocks (and any a second late)


def test_a_checkpoint_kept_on_two_ranks_is_refused_on_three_naming_why(tmp_path):
    store = str(tmp_path / "s")
    with pytest.raises(somatize.RankLost):
        launch(ddp_tasks.resumed, store, 4, nprocs=2, timeout_s=TIMEOUT_S)  # a checkpoint at step 3, then lost
    with pytest.raises(somatize.LaunchError, match=r"kept by a job of 2 ranks, and this one runs on 3 ranks"):
        launch(ddp_tasks.resumed, store, nprocs=3, timeout_s=TIMEOUT_S)



def mixed_oracle(precision, every, init_scale, spike):
    """A hand-written autocast loop in one process on the whole batches: the
    scaler's scale, unscale_, step and update once per group, each step's loss
    weighted by 1/every; the schedule stepped on the updates not skipped."""
    dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}[precision]
    g = built(seed=100)
    net = torch.nn.Sequential(copy.deepcopy(g.node("body").net), copy.deepcopy(g.node("head").out))
    opt = torch.optim.Adam(net.parameters(), lr=1e-2)
    sched = ddp_tasks.schedule_of(opt, True)
    scaler = ddp_tasks.scaler_of(init_scale) if precision == "fp16" else None
    moved, scales, lrs, losses, seen = [], [], [], [], []
    for i, (x, y) in enumerate(ddp_tasks.mixed_batches(spike)):
        with torch.autocast("cpu", dtype=dtype):
            out = net(x)
            loss = ddp_tasks.MSE(out, y)
        out.register_hook(lambda grad: seen.append(grad.float().reshape(-1)))
        losses.append(loss.item())
        (loss / every if scaler is None else scaler.scale(loss / every)).backward()
        went = False
        if (i + 1) % every == 0:
            if scaler is None:
                opt.step()
                went = True
            else:
                scaler.unscale_(opt)
                before = scaler.get_scale()
                scaler.step(opt)
                scaler.update()
                went = scaler.get_scale() >= before
            opt.zero_grad()
            if went:
                sched.step()
        moved.append(went)
        scales.append(scaler.get_scale() if scaler is not None else None)
        lrs.append(opt.param_groups[0]["lr"])
    weights = torch.cat([p.detach().reshape(-1) for p in net.parameters()])
    return weights, moved, scales, lrs, losses, torch.stack(seen)


MIXED = {  # precision, every, the scaler's first scale, the step whose last example overflows its rank alone
    "fp16": ("fp16", 1, 2.0**28, 6),
    "fp16,every=2": ("fp16", 2, 2.0**20, 8),
    "bf16": ("bf16", 1, None, None),
}


@pytest.mark.parametrize("case", list(MIXED))
def test_mixed_precision_on_two_ranks_skips_and_scales_as_one_process_on_the_whole_batch(case):
    precision, every, init_scale, spike = MIXED[case]
    got = launch(ddp_tasks.mixed, precision, every, init_scale, spike, nprocs=2, timeout_s=TIMEOUT_S)
    want, moved, scales, lrs, losses, seen = mixed_oracle(precision, every, init_scale, spike)
    assert got["same"] == [True] * ddp_tasks.STEPS_MIXED  # weights and scale bitwise equal on both ranks
    # the same updates skipped (a huge first scale, then inf found on one rank's gradients skips both),
    # the scale backed off and grown at the same steps, the schedule stepped only on the updates made
    assert got["moved"] == moved and got["scales"] == scales and got["lrs"] == lrs
    if precision == "fp16":  # the first update skipped, and the one holding the spike; the scale grown once
        closes = spike + every - 1 - spike % every
        assert moved[every - 1] is False and moved[closes] is False and sum(moved) >= 3
        assert scales[closes] < scales[closes - 1] and any(b > a for a, b in zip(scales, scales[1:]))
    assert got["updates"] == sum(moved)
    assert max(abs(a - b) for a, b in zip(got["losses"], losses)) <= 1e-3 * max(map(abs, losses))
    assert (torch.tensor(got["weights"]) - want).abs().max().item() <= 1e-3
    # each rank's backward starts from the numbers one process's does for its rows: the gradient of
    # the scaled loss w.r.t. the output (each rank's loss weighted by 1/2, not a mean over its half
    # alone, which doubled them and overflowed fp16 where one process did not). Equal up to the
    # forward's rounding: a half batch is not computed bitwise as those rows of the whole one.
    half = ddp_tasks.BATCH // 2
    for rank, rows in ((0, seen[:, :half]), (1, seen[:, half:])):
        mine = torch.tensor([[math.inf if v is None else v for v in step] for step in got["seen"][rank]],
                            dtype=rows.dtype)
        assert torch.equal(mine.isfinite(), rows.isfinite())  # overflowed in the same places (JSON: null)
        for step, want_rows in zip(mine, rows):
            fine = want_rows.isfinite()
            if fine.any():
                assert (step[fine] - want_rows[fine]).norm() <= 1e-2 * want_rows[fine].norm()


NON_FINITE = {  # read_every, every, the step whose share on the bad rank holds a nan, that rank, rank 0's watcher
    "read_every=4": (4, 1, 5, 1, "recorder"),
    "read_every=4,every=2": (4, 2, 6, 0, "recorder"),
    "read_every=1": (1, 1, 5, 1, "function"),
    "read_every=1,every=3": (1, 3, 4, 1, "function"),
    "rank 0 alone reads each step": (None, 1, 3, 1, "function"),
}


@pytest.mark.parametrize("case", list(NON_FINITE))
def test_a_non_finite_loss_on_one_rank_is_refused_by_every_rank_at_the_same_step_naming_it(case, tmp_path):
    read_every, every, bad_step, bad_rank, watcher = NON_FINITE[case]
    got = launch(ddp_tasks.non_finite, str(tmp_path / "s"), read_every, every, bad_step, bad_rank, watcher,
                 nprocs=2, timeout_s=TIMEOUT_S)
    said = got["ranks"]
    assert got["error"]["type"] == "NonFiniteLoss", got["error"]
    # every rank raised NonFiniteLoss (not RankLost), naming the same step and rank, after as many steps,
    # with the same message; the weights stayed bitwise the same on every rank
    assert [r["kind"] for r in said] == [1, 1], said
    assert {r["step"] for r in said} == {bad_step} and {r["ranks"] for r in said} == {1 << bad_rank}
    assert said[0]["steps"] == said[1]["steps"] and said[0]["digest"] == said[1]["digest"]
    assert said[0]["read_every"] == said[1]["read_every"] == (read_every or 1)  # rank 0's plain function rules
    assert got["same"]
    message = got["error"]["message"]
    assert f"step {bad_step}: the loss over every rank's examples is nan (rank {bad_rank}'s own loss was nan)" \
        in message and "every rank raises this" in message
    if (read_every or 1) == 1:  # refused before the update: nothing moved, on any rank
        assert said[0]["steps"] == bad_step + 1 and all(r["untouched"] for r in said)
    else:  # at the end of the step read_every - 1 after it, by which every rank has read it
        assert said[0]["steps"] == bad_step + read_every
        assert f"read off the device {read_every - 1} steps later (read_every={read_every})" in message
