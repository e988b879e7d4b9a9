"""The Trainer against a hand-written torch loop (the oracle): after K
updates, weights and optimizer state agree to 1e-6 for plain steps, every=N,
micro=N, both, partial groups, uneven batches and clipping."""

import pytest
import torch

from somatize.torch import Trainer, parameters

from torch_models import Oracle, batches, built, trained_optimizer

MSE = torch.nn.functional.mse_loss


def close(a, b, atol=1e-6):
    torch.testing.assert_close(a, b, atol=atol, rtol=0)


def agree(trainer, oracle):
    got, want = trainer.export(), oracle.weights()
    assert got.keys() == want.keys()
    for node in want:
        assert got[node].keys() == want[node].keys()
        for k in want[node]:
            close(got[node][k], want[node][k])
    s_got = trainer.optimizer.state_dict()["state"]
    s_want = oracle.opt.state_dict()["state"]
    assert s_got.keys() == s_want.keys() and len(s_want) > 0
    for i in s_want:
        assert s_got[i].keys() == s_want[i].keys()
        for k in s_want[i]:
            close(s_got[i][k], s_want[i][k])


def run(kind, dtype, every=1, micro=1, clip=None, groups=((64,),) * 5, flush=True, watching=None):
    """Train with the Trainer on `groups` of batches (each group a tuple of
    batch sizes) and with the oracle on each group concatenated."""
    g = built(dtype=dtype)
    oracle = Oracle(g, kind, clip=clip)
    trainer = Trainer(
        g, objective=MSE, optimizer=trained_optimizer(kind, g), every=every, micro=micro, clip=clip, watching=watching
    )
    seed = 10
    for sizes in groups:
        group = [batches(1, n=n, dtype=dtype, seed=(seed := seed + 1))[0] for n in sizes]
        for b in group:
            trainer.step(b)
        oracle.update(group)
    if flush:
        trainer.close_group()
    assert trainer.updates == len(groups)
    return trainer, oracle


KINDS = ["adam", "sgd"]
DTYPES = [torch.float64, torch.float32]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kind", KINDS)
def test_plain_steps_match_the_oracle(kind, dtype):
    agree(*run(kind, dtype))


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("shape", [{}, {"every": 2, "micro": 2}, {"clip": 0.5}])
def test_the_instruments_on_change_nothing_the_oracle_computes(kind, shape):
    """Watched, the Trainer records its instruments on every update (norms,
    a copy of the weights, output statistics): the training is still the
    hand-written loop's, bit for bit in float32."""
    seen = []
    groups = ((64, 64),) * 4 if "every" in shape else ((64,),) * 8
    trainer, oracle = run(kind, torch.float32, groups=groups, watching=seen.append, **shape)
    assert {"grad_norm", "update_norm", "out_zeros"} <= {f["fact"] for f in seen}
    want = oracle.weights()
    for node, named in trainer.export().items():
        for k, t in named.items():
            close(t, want[node][k], atol=0) if not shape else close(t, want[node][k])


@pytest.mark.parametrize("kind", KINDS)
def test_plain_float32_steps_are_bit_identical_to_the_oracle(kind):
    trainer, oracle = run(kind, torch.float32, groups=((64,),) * 8)
    want = oracle.weights()
    for node, named in trainer.export().items():
        for k, t in named.items():
            assert torch.equal(t, want[node][k]), (node, k)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kind", KINDS)
def test_every_4_is_one_step_on_the_4_batches_concatenated(kind, dtype):
    agree(*run(kind, dtype, every=4, groups=((64,) * 4,) * 4))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kind", KINDS)
def test_micro_4_is_one_step_on_the_whole_batch(kind, dtype):
    agree(*run(kind, dtype, micro=4, groups=((64,),) * 5))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kind", KINDS)
def test_every_2_micro_2_multiply(kind, dtype):
    agree(*run(kind, dtype, every=2, micro=2, groups=((64, 64),) * 5))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kind", KINDS)
def test_a_partial_last_group_is_one_step_on_what_it_holds(kind, dtype):
    # 4 + 4 + 3 steps with every=4: flush() closes the last group of 3.
    agree(*run(kind, dtype, every=4, groups=((64,) * 4, (64,) * 4, (64,) * 3)))


@pytest.mark.parametrize("kind", KINDS)
def test_uneven_batches_and_pieces_weigh_by_examples(kind):
    # every=2 over batches of 64 and 16 (and a group of 16 then 64), micro=3
    # cutting 64 into 22/21/21: still one step on the concatenation.
    agree(*run(kind, torch.float64, every=2, micro=3, groups=((64, 16), (16, 64), (30, 30))))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kind", KINDS)
def test_clip_matches_the_oracle_and_actually_clips(kind, dtype):
    trainer, oracle = run(kind, dtype, every=2, clip=0.5, groups=((64, 64),) * 5)
    assert max(oracle.norms) > 0.5  # the clip was not a no-op
    agree(trainer, oracle)


def test_without_close_group_the_partial_group_is_still_open():
    g = built(dtype=torch.float64)
    before = g.node("head").out.weight.detach().clone()
    trainer = Trainer(g, objective=MSE, optimizer=trained_optimizer("sgd", g), every=4)
    for b in batches(3, dtype=torch.float64):
        trainer.step(b)
    assert trainer.updates == 0 and torch.equal(g.node("head").out.weight, before)
    assert trainer.close_group() is True and trainer.updates == 1
    assert trainer.close_group() is False  # nothing left open


def test_close_group_tells_the_watchers_it_updated_after_the_last_steps_facts():
    g = built(dtype=torch.float64)
    seen = []
    trainer = Trainer(g, objective=MSE, optimizer=trained_optimizer("sgd", g), every=4, watching=seen.append)
    for b in batches(3, dtype=torch.float64):
        trainer.step(b)
    assert "updated" not in [f["fact"] for f in seen]
    trainer.close_group()
    said = [f["fact"] for f in seen if f["fact"] in ("loss", "trainer_us", "updated")]  # not the instruments'
    assert said[-3:] == ["loss", "trainer_us", "updated"]
    trainer.close_group()  # nothing open: nothing said
    assert [f["fact"] for f in seen].count("updated") == 1


def test_the_trainer_has_no_flush_any_more():
    # flush means "make durable" on a Recorder and "send" on Live; the
    # Trainer's word is close_group, and the deprecated alias is gone.
    assert not hasattr(Trainer, "flush")


def test_fit_closes_the_open_group_at_the_end_of_each_epoch():
    # 3 batches, every=2, 2 epochs: groups (b0 b1) (b2) per epoch, 4 updates.
    data = batches(3, dtype=torch.float64)
    g = built(dtype=torch.float64)
    oracle = Oracle(g, "adam")
    trainer = Trainer(g, objective=MSE, optimizer=trained_optimizer("adam", g), every=2)
    trainer.fit(data, epochs=2, progress=False)
    for _ in range(2):
        oracle.update(data[:2])
        oracle.update(data[2:])
    assert trainer.updates == 4
    agree(trainer, oracle)


@pytest.mark.parametrize("n, micro", [(64, 4), (10, 3)])  # equal pieces, and 4 + 3 + 3
def test_the_loss_of_a_micro_step_is_the_loss_of_the_whole_batch(n, micro):
    g = built(dtype=torch.float64)
    x, y = batches(1, n=n, dtype=torch.float64)[0]
    with torch.no_grad():
        whole = MSE(g.node("head").out(g.node("body").net(x)), y).item()
    seen = []
    trainer = Trainer(g, objective=MSE, optimizer=trained_optimizer("sgd", g), micro=micro, watching=seen.append)
    assert trainer.step((x, y)).item() == pytest.approx(whole, rel=1e-12)
    trainer.deliver()
    losses = [f["value"] for f in seen if f["fact"] == "loss"]
    assert losses == [pytest.approx(whole, rel=1e-12)]


def test_a_step_that_raises_midway_drops_the_open_group():
    # every=2, micro=2: step 0 completes; step 1's second piece fails after
    # its first piece ran backward. Neither may reach an update: the next
    # group is steps 2 and 3 alone, one step on their concatenation.
    g = built(dtype=torch.float64)
    oracle = Oracle(g, "adam")
    calls = []

    def objective(out, y):
        calls.append(1)
        if len(calls) == 4:
            raise RuntimeError("the objective failed")
        return MSE(out, y)

    trainer = Trainer(g, objective=objective, optimizer=trained_optimizer("adam", g), every=2, micro=2)
    data = batches(4, dtype=torch.float64)
    trainer.step(data[0])
    with pytest.raises(RuntimeError, match="objective failed"):
        trainer.step(data[1])
    assert all(p.grad is None for p in parameters(g))
    trainer.step(data[2])
    trainer.step(data[3])
    oracle.update(data[2:])
    assert trainer.updates == 1
    agree(trainer, oracle)


@pytest.mark.parametrize("shape", [{}, {"every": 2, "micro": 2}])
def test_the_backward_clocks_hooks_change_nothing_the_oracle_computes(shape):
    """Watched, the first updates put a hook on each node's output to time its
    backward (backward_us per node): the gradients and the updates are still
    the hand-written loop's, bit for bit in float32 for plain steps."""
    seen = []
    groups = ((64, 64),) * 4 if shape else ((64,),) * 8
    trainer, oracle = run("adam", torch.float32, groups=groups, watching=seen.append, **shape)
    timed = {f["node"] for f in seen if f["fact"] == "backward_us" and "node" in f}
    assert timed == {"body", "head"}
    want = oracle.weights()
    for node, named in trainer.export().items():
        for k, t in named.items():
            close(t, want[node][k], atol=0) if not shape else close(t, want[node][k])


@pytest.mark.parametrize("read_every", [1, 32])
def test_the_instruments_values_are_a_hand_written_loops_norms_and_shares(read_every):
    """Each recorded update's numbers, read off the device in bulk and summed
    node by node in Python (read_every=32) or read at once (read_every=1),
    are the hand-written loop's: the L2 norm over each node's gradients,
    weights and update (one vector of all its parameters, float64), the
    share of its gradient entries and of its output's entries that are 0."""
    g = built()
    seen = []
    trainer = Trainer(g, objective=MSE, optimizer=trained_optimizer("adam", g), watching=seen.append,
                      read_every=read_every)
    oracle_g = built()  # the same weights: the hand-written loop
    body, head = oracle_g.node("body").net, oracle_g.node("head").out
    nets = {"body": list(body.parameters()), "head": list(head.parameters())}
    opt = trained_optimizer("adam", oracle_g)
    want = []
    for x, y in batches(3, n=64, seed=5):
        with torch.no_grad():  # a dead unit (zeros in the gradients) and a dead output column
            for net in (body, g.node("body").net):
                net[0].bias[0] = -100.0
                net[2].weight[0] = 0.0
                net[2].bias[0] = 0.0
        hidden = body(x)
        out = head(hidden)
        MSE(out, y).backward()
        flat = {n: torch.cat([p.detach().reshape(-1).double() for p in ps]) for n, ps in nets.items()}
        grads = {n: torch.cat([p.grad.reshape(-1).double() for p in ps]) for n, ps in nets.items()}
        opt.step()
        opt.zero_grad()
        for name, output in (("body", hidden), ("head", out)):
            moved = torch.cat([p.detach().reshape(-1).double() for p in nets[name]]) - flat[name]
            want.append({"out_zeros": (output == 0).sum().item() / output.numel(),
                         "grad_norm": grads[name].norm().item(), "weight_norm": flat[name].norm().item(),
                         "update_norm": moved.norm().item(),
                         "grad_zeros": (grads[name] == 0).sum().item() / grads[name].numel()})
        trainer.step((x, y))
    trainer.deliver()
    got = [{} for _ in want]
    k = {"body": 0, "head": 1}
    steps = {"body": -1, "head": -1}
    for f in seen:
        if f["fact"] == "out_zeros":
            steps[f["node"]] += 1
        if f["fact"] in want[0]:
            got[2 * steps[f["node"]] + k[f["node"]]][f["fact"]] = f["value"]
    assert want[0]["out_zeros"] == 1 / 32 and want[0]["grad_zeros"] > 0  # the shares are not all 0
    for g_, w in zip(got, want):
        assert g_.keys() == w.keys()
        for fact in w:
            if fact.endswith("zeros"):
                assert g_[fact] == pytest.approx(w[fact], rel=1e-12, abs=0), fact  # counts: exact, 1 - n/N
            else:
                assert g_[fact] == pytest.approx(w[fact], rel=1e-6), fact  # float32 norms, summed otherwise


@pytest.mark.parametrize("setting", [{}, {"device": "cpu"}, {"read_every": 1}, {"watched": True}])
@pytest.mark.parametrize("kind", KINDS)
def test_one_step_one_piece_is_the_hand_written_loop_bit_for_bit_whatever_else_is_set(kind, setting):
    """A step that is its group in one piece (every=1, micro=1) takes one
    path whatever else is set: its loss is the objective's, never weighed,
    so float64 batches of 49 (where 49 * (1 / 49) is not 1) train bit for
    bit as the hand-written loop does, with device= too."""
    seen, setting = [], dict(setting)
    if setting.pop("watched", False):
        setting["watching"] = seen.append  # the instruments on, the clocks said
    g = built(dtype=torch.float64)
    oracle = Oracle(g, kind)
    trainer = Trainer(g, MSE, trained_optimizer(kind, g), **setting)
    for b in batches(6, n=49, dtype=torch.float64, seed=11):
        trainer.step(b)
        oracle.update([b])
    want = oracle.weights()
    for node, named in trainer.export().items():
        for k, t in named.items():
            assert torch.equal(t, want[node][k]), (node, k)
    assert trainer.updates == 6 and ("watching" not in setting or any(f["fact"] == "grad_norm" for f in seen))
