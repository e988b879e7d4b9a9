"""`somatize.transformers.Callback` (issue 32, item 4): the real Hugging Face
`Trainer` (transformers with accelerate) trains a tiny BERT built from its
config on random tokens, on the CPU, nothing downloaded. The oracle is HF's
own `state.log_history`: what the run records is what HF logged, by step."""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

os.environ["HF_HUB_OFFLINE"] = "1"  # nothing is downloaded; set before transformers is imported

import pytest  # noqa: E402
import torch  # noqa: E402
from transformers import BertConfig, BertForSequenceClassification, Trainer, TrainerCallback, TrainingArguments  # noqa: E402

from somatize._base.errors import SomatizeKeyError, SomatizeValueError  # noqa: E402
from somatize.record import curve, runs  # noqa: E402
from somatize.transformers import Callback, fact_name  # noqa: E402

TESTS = Path(__file__).parent


class Tokens(torch.utils.data.Dataset):
    """Random token sequences of 8 and a label each, made from a seed."""

    def __init__(self, n, seed):
        g = torch.Generator().manual_seed(seed)
        self.x = torch.randint(0, 64, (n, 8), generator=g)
        self.y = torch.randint(0, 2, (n,), generator=g)

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return {"input_ids": self.x[i], "labels": self.y[i]}


class Crash(TrainerCallback):
    """Raises inside train() as step ``at`` ends, before HF logs it."""

    def __init__(self, at):
        self.at = at

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == self.at:
            raise RuntimeError(f"boom at step {self.at}")


def tiny(out, callbacks, max_steps=6, trainer=Trainer, **kw):
    """A Trainer of a one-layer BERT (hidden size 16), a loss logged every
    step, an evaluation and a checkpoint every 3 steps."""
    torch.manual_seed(0)
    model = BertForSequenceClassification(BertConfig(vocab_size=64, hidden_size=16, num_hidden_layers=1,
                                                     num_attention_heads=2, intermediate_size=32))
    args = TrainingArguments(output_dir=str(out), report_to=[], use_cpu=True, max_steps=max_steps,
                             logging_steps=1, eval_strategy="steps", eval_steps=3, save_steps=3,
                             per_device_train_batch_size=4, learning_rate=1e-3, disable_tqdm=True, **kw)
    return trainer(model=model, args=args, train_dataset=Tokens(32, 1), eval_dataset=Tokens(8, 2),
                   callbacks=callbacks)


def by_step(store, run, fact):
    """``{HF's step: [values]}`` of one fact, each forward read as the step it recorded."""
    steps = curve(store, run, "step")
    out = {}
    for forward, value in curve(store, run, fact).items():
        out.setdefault(int(steps[forward]), []).append(value)
    return out


def logged(history, key):
    """HF's own log: ``{step: [values]}`` of ``key``."""
    out = {}
    for entry in history:
        if key in entry:
            out.setdefault(entry["step"], []).append(entry[key])
    return out


def only_run(store):
    table = runs(store)
    assert len(table) == 1, table["run"].tolist()
    return table.iloc[0]


def test_a_training_is_recorded_as_hf_logged_it(tmp_path):
    store = tmp_path / "store"
    cb = Callback(store, config={"note": "tiny", "learning_rate": "mine"})
    trainer = tiny(tmp_path / "out", [cb])
    trainer.train()
    history = trainer.state.log_history
    run = cb.run

    assert by_step(store, run, "loss") == logged(history, "loss") != {}
    assert list(logged(history, "loss")) == [1, 2, 3, 4, 5, 6]
    assert by_step(store, run, "lr") == logged(history, "learning_rate")
    assert by_step(store, run, "grad_norm_total") == logged(history, "grad_norm")
    assert by_step(store, run, "val_loss") == logged(history, "eval_loss")
    assert list(by_step(store, run, "val_loss")) == [3, 6]
    assert by_step(store, run, "eval_runtime") == logged(history, "eval_runtime")  # a time keeps HF's name
    assert by_step(store, run, "epoch") == {s: v[:1] for s, v in logged(history, "epoch").items()}  # said once

    row = only_run(store)
    assert (row["run"], row["state"], row["steps"], row["forwards"]) == (run, "finished", 6, 6)
    assert row["loss.last"] == history[-3]["loss"]  # the last step's loss (then its evaluation, then the totals)
    assert row["val_loss.best"] == min(logged(history, "eval_loss")[3] + logged(history, "eval_loss")[6])
    assert row["config.model.hidden_size"] == 16 and row["config.model.id2label.0"] == "LABEL_0"
    assert row["config.per_device_train_batch_size"] == 4 and row["config.max_steps"] == 6
    assert (row["config.note"], row["config.learning_rate"]) == ("tiny", "mine")  # your keys win
    assert logged(history, "train_loss") and logged(history, "total_flos")
    for total in ("train_loss", "train_runtime", "total_flos", "train_samples_per_second"):
        with pytest.raises(SomatizeKeyError):  # the totals train() logs as it ends are not recorded
            curve(store, run, total)


def test_the_fact_names_follow_one_rule():
    assert [fact_name(k) for k in ("loss", "learning_rate", "grad_norm", "epoch", "eval_loss", "eval_accuracy",
                                   "eval_runtime", "eval_samples_per_second", "eval_mem_cpu_alloc_delta",
                                   "test_f1", "my_metric")] == [
        "loss", "lr", "grad_norm_total", "epoch", "val_loss", "val_accuracy",
        "eval_runtime", "eval_samples_per_second", "eval_mem_cpu_alloc_delta", "test_f1", "my_metric"]


@pytest.mark.parametrize("restore", [False, True], ids=["state-read", "callback-remade-by-hf"])
def test_a_training_resumed_from_a_checkpoint_continues_its_run_with_no_step_twice(tmp_path, restore):
    store, out = tmp_path / "store", tmp_path / "out"
    first = tiny(out, [Callback(store), Crash(at=5)], restore_callback_states_from_checkpoint=restore)
    with pytest.raises(RuntimeError, match="boom at step 5"):
        first.train()  # step 4 was recorded after checkpoint-3 was saved
    run = only_run(store)["run"]
    assert list(by_step(store, run, "loss")) == [1, 2, 3, 4]

    cb = Callback(store)  # no name: the checkpoint's run
    second = tiny(out, [cb], restore_callback_states_from_checkpoint=restore)
    second.train(resume_from_checkpoint=str(out / "checkpoint-3"))

    row = only_run(store)
    assert (row["run"], row["state"], row["steps"], row["forwards"]) == (run, "finished", 6, 6)
    loss = by_step(store, run, "loss")
    assert list(loss) == [1, 2, 3, 4, 5, 6] and all(len(v) == 1 for v in loss.values())  # no step twice
    # HF's history of the resumed training (the checkpoint's steps 1 to 3, then its own) is the oracle
    assert loss == logged(second.state.log_history, "loss")
    assert by_step(store, run, "val_loss") == logged(second.state.log_history, "eval_loss")
    assert list(by_step(store, run, "val_loss")) == [3, 6]
    assert cb.run == run or restore  # HF remade the Callback from the checkpoint: this one never recorded


def test_an_exception_in_a_script_leaves_the_run_interrupted_with_its_cause(tmp_path):
    script = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(TESTS)!r})
        from test_transformers import Crash, tiny
        from somatize.transformers import Callback
        tiny({str(tmp_path / "out")!r}, [Callback({str(tmp_path / "store")!r}), Crash(at=3)]).train()
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 1 and "boom at step 3" in done.stderr
    row = only_run(tmp_path / "store")
    assert (row["state"], row["cause"]) == ("interrupted", "RuntimeError: boom at step 3")
    assert list(by_step(tmp_path / "store", row["run"], "loss")) == [1, 2]


def test_an_exception_in_a_notebook_cell_ends_the_run_when_the_cell_ends(tmp_path):
    """A real IPython shell runs the cell: the run is interrupted, naming the
    exception, while the process (the kernel) lives on."""
    script = textwrap.dedent(f"""
        import json, sys
        sys.path.insert(0, {str(TESTS)!r})
        from IPython.core.interactiveshell import InteractiveShell
        shell = InteractiveShell.instance()
        shell.run_cell('''
        from test_transformers import Crash, tiny
        from somatize.transformers import Callback
        cb = Callback({str(tmp_path / "store")!r})
        tiny({str(tmp_path / "out")!r}, [cb, Crash(at=2)]).train()
        ''')
        from somatize.record import runs
        row = runs({str(tmp_path / "store")!r}).iloc[0]
        hooks = [f for f in shell.events.callbacks["post_run_cell"] if getattr(f, "__self__", None) is not None]
        print(json.dumps([row["state"], row["cause"], len(hooks)]))
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == ["interrupted", "RuntimeError: boom at step 2", 0]


def test_a_training_whose_exception_was_caught_is_ended_by_the_next_one(tmp_path):
    store = tmp_path / "store"
    cb = Callback(store)
    with pytest.raises(RuntimeError):
        tiny(tmp_path / "a", [cb, Crash(at=2)]).train()
    crashed = cb.run
    tiny(tmp_path / "b", [cb], max_steps=3).train()
    table = runs(store).set_index("run")
    assert len(table) == 2 and table.loc[crashed, "state"] == "interrupted"
    assert table.loc[cb.run, "state"] == "finished" and table.loc[cb.run, "steps"] == 3


def test_an_evaluation_after_train_is_recorded_at_the_last_step(tmp_path):
    store = tmp_path / "store"
    cb = Callback(store)
    trainer = tiny(tmp_path / "out", [cb], max_steps=4)
    trainer.train()
    metrics = trainer.evaluate()
    with pytest.warns(RuntimeWarning, match="'bad key'"):
        trainer.log({"bad key": 1.0, "my_metric": 2.5})
    assert by_step(store, cb.run, "val_loss") == {3: logged(trainer.state.log_history, "eval_loss")[3],
                                                   4: [metrics["eval_loss"]]}
    assert by_step(store, cb.run, "my_metric") == {4: [2.5]}
    row = only_run(store)
    assert (row["state"], row["steps"]) == ("finished", 4)


def test_only_the_world_process_zero_writes(tmp_path):
    class Elsewhere(Trainer):  # a rank other than 0: HF's state says so
        def is_world_process_zero(self):
            return False

    cb = Callback(tmp_path / "store")
    trainer = tiny(tmp_path / "out", [cb], max_steps=3, trainer=Elsewhere, save_strategy="no")
    trainer.train()
    assert trainer.state.log_history and not trainer.state.is_world_process_zero
    assert not (tmp_path / "store").exists() and cb.run is None  # not even made


def test_a_name_already_in_the_store_is_refused_before_training(tmp_path):
    store = tmp_path / "store"
    tiny(tmp_path / "a", [Callback(store, run="bert")], max_steps=1, save_strategy="no").train()
    trainer = tiny(tmp_path / "b", [Callback(store, run="bert")], max_steps=1, save_strategy="no")
    with pytest.raises(SomatizeValueError, match="run 'bert' is already in the store.*run='bert-2'"):
        trainer.train()
    assert trainer.state.global_step == 0
    assert only_run(store)["state"] == "finished"


@pytest.mark.parametrize("package", ["transformers", "accelerate"])
def test_without_the_extra_importing_it_names_the_extra(package):
    code = (f"import sys\nsys.modules[{package!r}] = None  # as if not installed\n"
            "try:\n    import somatize.transformers\nexcept ImportError as e:\n"
            "    print(type(e).__name__, e.name, str(e))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.startswith(f"MissingExtra {package} somatize.transformers needs {package}")
    assert 'pip install "somatize[transformers]"' in done.stdout


def test_somatize_itself_never_imports_transformers():
    code = "import sys, somatize, somatize.record, somatize.torch, somatize.cli\nprint('transformers' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"


def crashed(tmp_path, store):
    """A training recorded into ``store`` that crashed at step 5, after
    checkpoint-3; the checkpoint's trainer_state.json, read."""
    with pytest.raises(RuntimeError):
        tiny(tmp_path / "out", [Callback(store), Crash(at=5)]).train()
    return json.loads((tmp_path / "out" / "checkpoint-3" / "trainer_state.json").read_text())


def resumed(tmp_path, store, state=None):
    """The crashed training resumed from checkpoint-3 with a Callback of
    ``store``, its trainer_state.json first written as ``state``."""
    if state is not None:
        (tmp_path / "out" / "checkpoint-3" / "trainer_state.json").write_text(json.dumps(state))
    trainer = tiny(tmp_path / "out", [Callback(store)])
    trainer.train(resume_from_checkpoint=str(tmp_path / "out" / "checkpoint-3"))
    return trainer


def test_a_checkpoint_whose_position_is_not_one_the_callback_writes_is_refused(tmp_path):
    state = crashed(tmp_path, tmp_path / "store")
    for recorded in ({"run": 7, "forwards": 3}, {"forwards": 3}, {"run": "x", "forwards": "3"},
                     {"run": "x", "forwards": -1}, {"run": "x", "forwards": True}, [1, 2]):
        state["stateful_callbacks"]["Callback"]["attributes"]["recorded"] = recorded
        with pytest.raises(SomatizeValueError, match="trainer_state.json holds .* which is not one it writes"):
            resumed(tmp_path, tmp_path / "store", state)
    assert len(runs(tmp_path / "store")) == 1


def test_a_checkpoint_ahead_of_its_run_is_refused_naming_both(tmp_path):
    state = crashed(tmp_path, tmp_path / "store")
    state["stateful_callbacks"]["Callback"]["attributes"]["recorded"]["forwards"] = 40
    with pytest.raises(SomatizeValueError, match="holds 4 forwards, fewer than the 40 to rewind to"):
        resumed(tmp_path, tmp_path / "store", state)
    row = only_run(tmp_path / "store")
    assert row["state"] == "interrupted" and "fewer than the 40" in row["cause"]
    assert list(by_step(tmp_path / "store", row["run"], "loss")) == [1, 2, 3, 4]  # nothing dropped


def test_a_checkpoint_resumed_into_another_store_begins_its_run_there_at_the_checkpoint(tmp_path):
    crashed(tmp_path, tmp_path / "store")
    trainer = resumed(tmp_path, tmp_path / "other")
    first, there = only_run(tmp_path / "store"), only_run(tmp_path / "other")
    assert there["run"] == first["run"] and (there["state"], there["steps"]) == ("finished", 3)
    assert by_step(tmp_path / "other", there["run"], "loss") == {
        s: v for s, v in logged(trainer.state.log_history, "loss").items() if s > 3}
    assert there["config.learning_rate"] == 1e-3  # a new run: the training's config
