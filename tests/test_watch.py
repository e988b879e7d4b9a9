"""`somatize.torch.watch(module, recorder)`: a plain module trained by a
hand-written loop records what a Trainer's run records (issue 32, item 2).
The oracles: the unwatched loop (a watched model trains bit for bit as it),
and the Trainer (the same sick model trained by it and by a watched loop is
diagnosed the same, number for number)."""

import copy
from collections import OrderedDict

import pytest
import torch
from diagnosis_models import ACTIVATIONS, deep
from diagnosis_models import train as train_by_trainer
from digits_models import cnn, digits

import somatize
from somatize import Recorder, Store
from somatize._base.errors import SomatizeError, SomatizeTypeError, SomatizeValueError
from somatize._graph.watchers import INSTRUMENT_FACTS
from somatize._widgets._spent import spent_data
from somatize.record import curve, facts, runs
from somatize.torch import watch
from somatize.torch._instruments import EVERY, FIRST

from torch_models import HostSyncs, batches

CE = torch.nn.functional.cross_entropy
MSE = torch.nn.functional.mse_loss
STEPS = FIRST + EVERY + 2  # the first ten updates measured, then the 40th, and two after it
MEASURED = list(range(FIRST)) + [EVERY]
NODES = [f"features.{i}" for i in range(7)] + [f"classifier.{i}" for i in range(5)]
UPDATE = ("grad_norm", "weight_norm", "update_norm", "grad_zeros")


def digits_net(seed=0, dropout=0.25):
    """The digits CNN (tests/digits_models.py) as one plain module, its parts named features and classifier."""
    g = cnn(seed, dropout=dropout)
    return torch.nn.Sequential(OrderedDict(features=g.node("features").net, classifier=g.node("classifier").net))


def digit_batches(k, size=64):
    train, _ = digits()
    loader = torch.utils.data.DataLoader(train, batch_size=size, shuffle=True,
                                         generator=torch.Generator().manual_seed(3))
    out = []
    while len(out) < k:
        out += list(loader)
    return out[:k]


def hand_loop(net, opt, data, rec=None, seed=7, log_first=False):
    """Forward, cross-entropy, backward, step, zero_grad, the loss logged
    (after the step, or with ``log_first`` its step begun by log before the
    forward); dropout's random stream from ``seed``. Returns the losses."""
    torch.manual_seed(seed)
    losses = []
    for i, (x, y) in enumerate(data):
        if rec is not None and log_first:
            rec.log({"lr": opt.param_groups[0]["lr"]}, step=i)
        loss = CE(net(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.detach())
        if rec is not None:
            rec.log({"loss": loss}, step=i if log_first else None)
    return losses


def sgd(net):
    return torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)


def hooks_left(net, opt):
    """Every hook torch keeps on the modules, their parameters and the optimizer."""
    left = []
    for name, m in net.named_modules():
        for kind in ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks"):
            left += [(name, kind)] * len(getattr(m, kind))
    for name, p in net.named_parameters():
        for kind in ("_backward_hooks", "_post_accumulate_grad_hooks"):
            left += [(name, kind)] * len(getattr(p, kind) or {})
    for kind in ("_optimizer_step_pre_hooks", "_optimizer_step_post_hooks"):
        left += [("optimizer", kind)] * len(getattr(opt, kind))
    return left


# -- exact -----------------------------------------------------------------


@pytest.mark.parametrize("with_optimizer", [True, False])
def test_a_watched_model_trains_bit_for_bit_as_the_unwatched_one(tmp_path, with_optimizer):
    data = digit_batches(STEPS)
    plain = digits_net()
    plain_losses = hand_loop(plain, sgd(plain), data)
    net = digits_net()
    opt = sgd(net)
    with Recorder(Store(tmp_path), run="r") as rec:
        w = watch(net, rec, optimizer=opt if with_optimizer else None)
        losses = hand_loop(net, opt, data, rec)
        w.remove()
    assert all(torch.equal(a, b) for a, b in zip(losses, plain_losses)) and len(losses) == STEPS
    for (name, p), q in zip(net.named_parameters(), plain.parameters()):
        assert torch.equal(p, q), name
    for (name, b), c in zip(net.named_buffers(), plain.buffers()):  # BatchNorm's running statistics
        assert torch.equal(b, c), name
    assert curve(tmp_path, "r", "grad_norm/features.0").index.tolist() == MEASURED  # it did watch
    assert curve(tmp_path, "r", "loss").tolist() == [float(v) for v in plain_losses]


def test_without_optimizer_the_update_is_measured_to_the_same_numbers(tmp_path):
    """Without optimizer=, the gradients and weights as the backward ends and the
    change until the next step are what the optimizer's hooks see: the same."""
    data = digit_batches(STEPS)
    for run, given in (("with", True), ("without", False)):
        net = digits_net()
        opt = sgd(net)
        with Recorder(Store(tmp_path), run=run) as rec:
            watch(net, rec, optimizer=opt if given else None)
            hand_loop(net, opt, data, rec)
    for node in ("features.0", "features.1", "features.3", "classifier.1", "classifier.4"):
        for fact in UPDATE:
            a, b = curve(tmp_path, "with", f"{fact}/{node}"), curve(tmp_path, "without", f"{fact}/{node}")
            assert a.index.tolist() == MEASURED and a.equals(b), (fact, node)


@pytest.mark.parametrize("keyword", [False, True])
def test_an_optimizer_stepped_with_a_closure_is_measured_after_the_closure_made_the_gradients(tmp_path, keyword):
    """optimizer.step(closure) runs the forward and backward inside step,
    after its pre-hooks (LBFGS, Lightning): the update is measured to the
    numbers a loop stepping after its backward gets, and trains the same."""
    data = digit_batches(STEPS)
    net = digits_net()
    opt = sgd(net)
    with Recorder(Store(tmp_path), run="plain") as rec:
        watch(net, rec, optimizer=opt)
        plain_losses = hand_loop(net, opt, data, rec)
    net = digits_net()
    opt = sgd(net)
    torch.manual_seed(7)  # hand_loop's dropout stream
    with Recorder(Store(tmp_path), run="closure") as rec:
        w = watch(net, rec, optimizer=opt)
        for x, y in data:
            def closure(x=x, y=y):
                opt.zero_grad()
                loss = CE(net(x), y)
                loss.backward()
                return loss

            loss = opt.step(closure=closure) if keyword else opt.step(closure)
            rec.log({"loss": loss.detach()})
        w.remove()
    assert curve(tmp_path, "closure", "loss").tolist() == [float(v) for v in plain_losses]
    for node in ("features.0", "features.3", "classifier.1", "classifier.4"):
        for fact in UPDATE:
            a, b = curve(tmp_path, "plain", f"{fact}/{node}"), curve(tmp_path, "closure", f"{fact}/{node}")
            assert a.index.tolist() == MEASURED and a.equals(b), (fact, node)


# -- the record: nodes, steps, spent ---------------------------------------------


def test_spent_names_the_modules_nodes_with_their_forward_and_backward_time(tmp_path):
    net = digits_net()
    opt = sgd(net)
    with Recorder(Store(tmp_path), run="r") as rec:
        w = watch(net, rec, optimizer=opt)
        hand_loop(net, opt, digit_batches(STEPS), rec)
    assert list(w.nodes) == NODES
    d = spent_data(tmp_path, "r")
    rows = {r["label"]: r for r in d["rows"] if r["kind"] == "node"}
    assert sorted(rows) == sorted(NODES) and d["forwards"] == STEPS
    for node, r in rows.items():
        assert r["count"] == len(MEASURED), node  # a forward measured on each measured step
        # every node's output takes gradients: each has a backward, its first left out as warm-up
        assert r["backward_steps"] == len(MEASURED) - 1, node
    # its picture's timeline: the last forward that timed its nodes, not the last (unmeasured) one
    t = d["timeline"]
    assert (t["forward"], t["last"], [s["node"] for s in t["spans"]]) == (EVERY, False, NODES)
    said = [(f["fact"], f.get("node")) for f in facts(tmp_path, "r", forward=EVERY)]
    ran = [n for f, n in said if f == "ran"]
    assert ran == NODES  # in the order they ran
    assert [n for f, n in said if f == "backward_us"] == NODES[::-1]  # the gradient reaches the last first
    assert said.index(("finished", None)) > said.index(("ran", NODES[-1]))
    assert said[-1] == ("loss", None)  # the step's facts, then its loss: one forward, as a Trainer's
    assert [f for f in said if f[0] == "ran"] and not {f for f, _ in facts(tmp_path, "r", forward=EVERY + 1)} & {
        "ran", "finished", "backward_us", *INSTRUMENT_FACTS}  # an unmeasured step says only its loss


@pytest.mark.parametrize("how", ["log after", "log first", "no log"])
def test_each_forward_of_the_module_is_a_step_with_or_without_log(tmp_path, how):
    net = digits_net()
    opt = sgd(net)
    data = digit_batches(12)
    with Recorder(Store(tmp_path), run="r") as rec:
        watch(net, rec, optimizer=opt)
        hand_loop(net, opt, data, rec=None if how == "no log" else rec, log_first=how == "log first")
        net.eval()
        with torch.no_grad():  # an evaluation: no step, nothing measured
            val = CE(net(data[0][0]), data[0][1])
        if how != "no log":
            rec.log({"val_loss": val}, step=11)
    row = runs(tmp_path).set_index("run").loc["r"]
    assert row["forwards"] == 12  # a step that says nothing else says its clock: each step is a forward
    assert row["steps"] == (0 if how == "no log" else 12)  # the steps of the loss logged
    assert curve(tmp_path, "r", "grad_norm/classifier.4").index.tolist() == list(range(10))
    assert curve(tmp_path, "r", "backward_us/features.0").index.tolist() == list(range(10))
    if how != "no log":
        assert curve(tmp_path, "r", "loss").index.tolist() == list(range(12))
        assert curve(tmp_path, "r", "val_loss").index.tolist() == [11]
        with pytest.raises(somatize.SomatizeKeyError):
            curve(tmp_path, "r", "step")  # each step is its forward: no step numbered otherwise


def test_a_loop_counting_from_one_keeps_its_numbers_beside_the_forwards(tmp_path):
    net = digits_net()
    opt = sgd(net)
    with Recorder(Store(tmp_path), run="r") as rec:
        watch(net, rec, optimizer=opt)
        for i, (x, y) in enumerate(digit_batches(3), start=1):
            loss = CE(net(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad()
            rec.log({"loss": loss}, step=i)
    assert curve(tmp_path, "r", "step").to_dict() == {0: 1, 1: 2, 2: 3}
    assert curve(tmp_path, "r", "grad_norm/features.0").index.tolist() == [0, 1, 2]


def test_the_numbers_are_read_with_the_loops_in_one_host_sync(tmp_path):
    net = digits_net()
    opt = sgd(net)
    data = digit_batches(FIRST)
    counted = HostSyncs(opt)
    with Recorder(Store(tmp_path), run="r") as rec:
        watch(net, rec, optimizer=opt)
        rec._logging.clock = lambda: 0  # no read by time (READ_AT_MOST_NS): this machine's speed decides nothing
        with counted:
            hand_loop(net, opt, data, rec)  # every step measured
            assert counted.count == 0  # nothing read yet: neither the loop's losses nor the watch's numbers
            rec.flush()
            assert counted.count == 1
    assert len(curve(tmp_path, "r", "update_norm/classifier.1")) == FIRST
    assert len(curve(tmp_path, "r", "out_zeros/features.2")) == FIRST


# -- removed, refused ---------------------------------------------------------


def test_remove_takes_every_hook_off_and_nothing_more_is_said(tmp_path):
    net = digits_net()
    opt = sgd(net)
    data = digit_batches(4)
    assert hooks_left(net, opt) == []
    with Recorder(Store(tmp_path), run="r") as rec:
        w = watch(net, rec, optimizer=opt)
        assert hooks_left(net, opt) != []
        loss = CE(net(data[0][0]), data[0][1])  # a measured step's forward: hooks on its graph's tensors
        w.remove()
        assert hooks_left(net, opt) == []
        loss.backward()  # the backward of the step measured before remove(): said no more
        opt.step()
        opt.zero_grad()
        rec.log({"loss": loss})
        hand_loop(net, opt, data[1:], rec)
        w.remove()  # again: nothing left to do
    assert hooks_left(net, opt) == [] and "removed" in repr(w)
    said = {f["fact"] for forward in range(4) for f in facts(tmp_path, "r", forward=forward)}
    # the first forward's, up to remove()
    assert said == {"ran", "out_zeros", "finished", "instruments_us", "loss", "wall_s"}
    assert [f["fact"] for f in facts(tmp_path, "r", forward=1)] == ["loss", "wall_s"]
    with Recorder(Store(tmp_path), run="again") as rec:  # removed, the Recorder takes another watch
        watch(net, rec)


def test_a_watch_begun_mid_run_begins_a_step_of_its_own(tmp_path):
    net = digits_net()
    opt = sgd(net)
    data = digit_batches(4)
    with Recorder(Store(tmp_path), run="r") as rec:
        hand_loop(net, opt, data[:2], rec)  # two steps logged, unwatched
        watch(net, rec, optimizer=opt)
        torch.manual_seed(7)
        for i, (x, y) in enumerate(data[2:], start=2):
            loss = CE(net(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad()
            rec.log({"loss": loss}, step=i)
    assert curve(tmp_path, "r", "loss").index.tolist() == [0, 1, 2, 3]
    assert curve(tmp_path, "r", "grad_norm/features.0").index.tolist() == [2, 3]  # with their own loss


def test_on_a_data_parallel_rank_other_than_0_it_hooks_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    net = digits_net()
    opt = sgd(net)
    rec = Recorder(Store(tmp_path), run="r")
    assert not rec.recording
    w = watch(net, rec, optimizer=opt)
    assert hooks_left(net, opt) == [] and list(w.nodes) == NODES
    hand_loop(net, opt, digit_batches(2), rec)
    w.remove()
    rec.close()
    assert not (tmp_path / "runs" / "r").exists()


def test_a_watch_ends_itself_once_its_recorder_is_closed(tmp_path):
    net = digits_net()
    opt = sgd(net)
    data = digit_batches(3)
    with Recorder(Store(tmp_path), run="r") as rec:
        w = watch(net, rec, optimizer=opt)
        hand_loop(net, opt, data[:1], rec)
    hand_loop(net, opt, data[1:])  # training on after the run ended: no error, nothing written
    assert w.removed and hooks_left(net, opt) == []
    assert runs(tmp_path).set_index("run").loc["r", "forwards"] == 1


@pytest.mark.parametrize("module, says", [
    (torch.nn.ReLU(), r"watch\(ReLU\): the module has no parameters"),
    (torch.nn.Linear(3, 2).requires_grad_(False), r"has 2 parameters and none takes gradients"),
])
def test_a_module_with_nothing_to_train_is_refused_saying_so(tmp_path, module, says):
    with Recorder(Store(tmp_path), run="r") as rec:
        with pytest.raises(SomatizeValueError, match=says) as e:
            watch(module, rec)
    assert isinstance(e.value, SomatizeError) and "Watch the model the loop trains" in str(e.value)


def test_a_second_watch_into_one_recorder_is_refused_naming_the_first(tmp_path):
    net, other = digits_net(), torch.nn.Linear(2, 2)
    with Recorder(Store(tmp_path), run="r") as rec:
        w = watch(net, rec)
        for module in (net, other):
            with pytest.raises(SomatizeValueError, match=r"watched already \(a watch of a Sequential\).*"
                                                         r"handle\.remove\(\)"):
                watch(module, rec)
        w.remove()
        watch(other, rec)  # the first removed: a second may watch


@pytest.mark.parametrize("args, says", [
    (("net", "rec"), "module is a torch.nn.Module"),
    ((None, "store"), "recorder is the somatize Recorder"),
])
def test_what_is_not_a_module_or_a_recorder_is_refused(tmp_path, args, says):
    net = digits_net()
    with Recorder(Store(tmp_path), run="r") as rec:
        given = {"net": net, "rec": rec, "store": tmp_path, None: net}
        module = "not a module" if args[0] == "net" else given[args[0]]
        recorder = given[args[1]]
        with pytest.raises(SomatizeTypeError, match=says):
            watch(module, recorder)
        with pytest.raises(SomatizeTypeError, match="the torch.optim.Optimizer"):
            watch(net, rec, optimizer="adam")


def test_a_recorder_a_trainer_holds_is_refused(tmp_path):
    from somatize.torch import Trainer, parameters

    g = cnn(0)
    with Recorder(Store(tmp_path), run="r") as rec:
        Trainer(g, CE, torch.optim.SGD(parameters(g), lr=0.1), watching=rec)
        with pytest.raises(SomatizeValueError, match=r"a Trainer watches this Recorder.*watch\(\) numbers"):
            watch(digits_net(), rec)


# -- nodes ---------------------------------------------------------------------


class Block(torch.nn.Module):
    """A module with a forward of its own: one node, whole."""

    def __init__(self):
        super().__init__()
        self.a, self.b = torch.nn.Linear(4, 4), torch.nn.Linear(4, 4)

    def forward(self, x):
        return self.b(torch.relu(self.a(x)))


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.scale = torch.nn.Parameter(torch.ones(4))
        self.blocks = torch.nn.ModuleList([Block(), Block()])
        self.heads = torch.nn.ModuleDict({"main": torch.nn.Linear(4, 1)})

    def forward(self, x):
        for block in self.blocks:
            x = block(x * self.scale)
        return self.heads["main"](x)


def test_lists_are_looked_into_a_module_of_its_own_is_one_node_a_loose_parameter_too(tmp_path):
    net = Net()
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)
    with Recorder(Store(tmp_path), run="r") as rec:
        w = watch(net, rec, optimizer=opt)
        for x, y in batches(2, n=8):
            loss = MSE(net(x[:, :4]), y)
            loss.backward()
            opt.step()
            opt.zero_grad()
            rec.log({"loss": loss})
    assert list(w.nodes) == ["scale", "blocks.0", "blocks.1", "heads.main"]
    said = facts(tmp_path, "r", forward=1)
    assert [f["node"] for f in said if f["fact"] == "ran"] == ["blocks.0", "blocks.1", "heads.main"]
    assert [f["node"] for f in said if f["fact"] == "grad_norm"] == ["scale", "blocks.0", "blocks.1", "heads.main"]


def test_a_module_without_parts_is_one_node_named_after_its_class(tmp_path):
    net = torch.nn.Linear(8, 1)
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    with Recorder(Store(tmp_path), run="r") as rec:
        w = watch(net, rec, optimizer=opt)
        for x, y in batches(2):
            loss = MSE(net(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad()
            rec.log({"loss": loss})
    assert w.nodes == ("Linear",)
    assert {f["fact"] for f in facts(tmp_path, "r", forward=0) if f.get("node") == "Linear"} == {
        "ran", "out_zeros", "backward_us", *UPDATE}


def test_parameters_the_optimizer_does_not_hold_are_said_once(tmp_path):
    net = digits_net()
    opt = torch.optim.SGD(net.features.parameters(), lr=0.05)
    with Recorder(Store(tmp_path), run="r") as rec:
        watch(net, rec, optimizer=opt)
        hand_loop(net, opt, digit_batches(2), rec)
    assert curve(tmp_path, "r", "not_optimized/classifier.1").to_dict() == {0: 32 * 4 * 4 * 64 + 64}
    assert curve(tmp_path, "r", "not_optimized/classifier.4").to_dict() == {0: 64 * 10 + 10}


# -- the diagnosis: the Trainer's, for a plain module ------------------------------


class Layer(torch.nn.Module):
    """diagnosis_models.Layer as a plain module: Linear, then an activation."""

    def __init__(self, linear, act, scale):
        super().__init__()
        self.linear, self.act, self.scale = linear, act, scale

    def forward(self, x):
        return ACTIVATIONS[self.act](self.linear(x * self.scale))


def as_module(g):
    """The six nodes of diagnosis_models.deep as one plain module (copies, so training it trains no graph)."""
    return torch.nn.Sequential(OrderedDict(
        (n.name, Layer(copy.deepcopy(n.linear), n.act, n.scale)) for n in g.nodes))


def test_a_dead_relu_layer_is_diagnosed_as_the_trainer_diagnoses_it(tmp_path):
    """The Trainer's case (test_diagnose: a ReLU pushed dead by a bias of
    -100) by a hand-written loop: the same findings, evidence and all."""
    store = Store(tmp_path)
    g = deep(0, dead=True)
    net = as_module(g)
    train_by_trainer(store, "trainer", g=g, steps=150)
    opt = torch.optim.Adam(net.parameters(), lr=1e-2)
    with Recorder(store, run="hand") as rec:
        watch(net, rec, optimizer=opt)
        for x, y in batches(150, seed=1):
            loss = MSE(net(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad()
            rec.log({"loss": loss})
    by_trainer, by_hand = somatize.diagnose(store, run="trainer"), somatize.diagnose(store, run="hand")
    dying = by_hand[0]
    assert (dying.node, dying.kind, dying.first, dying.last) == ("l3", "dying", 0, 149)
    assert {(f.node, f.kind) for f in by_hand} == {("l3", "dying"), ("l1", "not_updated"), ("l2", "not_updated"),
                                                   (None, "plateaued")}
    assert [f.to_dict() for f in by_hand] == [f.to_dict() for f in by_trainer]
    for name in ("grad_norm/l4", "update_norm/l5", "out_zeros/l3", "grad_zeros/l1"):
        assert curve(store, "hand", name).equals(curve(store, "trainer", name)), name
