"""Render docs/API.md, the API reference, from the docstrings of every public name.

    .venv/bin/python scripts/apidoc.py          # rewrite docs/API.md
    .venv/bin/python scripts/apidoc.py --check  # exit 1 if docs/API.md is not current

The public names are those of ``somatize``, ``somatize.record``,
``somatize.torch``, ``somatize.lightning`` and ``somatize.transformers``
(their ``__all__``), with the public methods and properties of each public
class, and the ``somatize`` command. tests/test_api_reference.py fails when a
public name has no entry or the page is not what this renders.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "API.md"
MODULES = {
    "somatize": "The engine, the Store, the Recorder, the public errors, diagnosis and importing runs.",
    "somatize.record": "Questions asked of a run's record, and the panels that draw it. "
                       "Every function takes the store (a `Store` or a path) and the run's name.",
    "somatize.torch": "PyTorch: the tensor codec (registered on import), any `nn.Module` as a node, the Trainer "
                      "and the weights helpers. "
                      "Needs `pip install \"somatize[torch]\"`.",
    "somatize.lightning": "Lightning: a `Trainer`'s fit recorded as a run, by a logger. "
                          "Needs `pip install \"somatize[lightning]\"`.",
    "somatize.transformers": "Hugging Face transformers: a `Trainer`'s training recorded as a run, by a callback. "
                             "Needs `pip install \"somatize[transformers]\"`.",
}


def public_names(module):
    """``[(qualified name, object, is_member)]``: each name in ``__all__``, each
    followed by the public methods and properties of its class."""
    out = []
    for name in module.__all__:
        obj = getattr(module, name)
        out.append((f"{module.__name__}.{name}", obj, False))
        if inspect.isclass(obj) and not issubclass(obj, BaseException):
            for attr, value in vars(obj).items():
                if attr.startswith("_"):
                    continue
                if isinstance(value, (property, staticmethod, classmethod)) or inspect.isfunction(value):
                    out.append((f"{module.__name__}.{name}.{attr}", value, True))
    return out


def _signature(name, obj, is_member):
    short = name.rsplit(".", 1)[-1]
    if isinstance(obj, property):
        return f"{short}  # a property"
    if inspect.isclass(obj) and issubclass(obj, BaseException):
        return f"class {short}({obj.__mro__[1].__name__})"
    target = obj.__func__ if isinstance(obj, (staticmethod, classmethod)) else obj
    try:
        sig = inspect.signature(target)
    except (TypeError, ValueError):
        return f"{short}(...)"
    params = list(sig.parameters.values())
    if is_member and not isinstance(obj, staticmethod) and params and params[0].name in {"self", "cls"}:
        params = params[1:]
    if params and all(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in params):
        params = []  # (*a, **k) says nothing (Graph refuses it: Graph.somatize builds one)
    text = re.sub(r" at 0x[0-9a-f]+", "", str(sig.replace(parameters=params)))  # no addresses
    return f"class {short}{text}" if inspect.isclass(obj) else f"{short}{text}"


def _text(doc):
    """A docstring as Markdown: RST's ``code`` becomes `code`."""
    return re.sub(r"``(.+?)``", r"`\1`", doc).rstrip()


def doc_of(obj):
    target = obj.fget if isinstance(obj, property) else obj
    if isinstance(target, (staticmethod, classmethod)):
        target = target.__func__
    return inspect.getdoc(target) or ""


def cli_help():
    import os

    os.environ["COLUMNS"] = "100"  # argparse wraps to the terminal: one width, whoever renders
    from somatize import cli

    def helps(parser):
        """The parser's help, then each subcommand's, theirs in turn (``import tensorboard``)."""
        parts = [parser.format_help()]
        for action in parser._actions:  # argparse keeps its subcommands here only
            if isinstance(action, argparse._SubParsersAction):
                for sub in action.choices.values():
                    parts += helps(sub)
        return parts

    return "\n\n".join(p.rstrip() for p in helps(cli.parser()))


# Shown before the reference: the one line each loop that is not a Trainer's needs (notebooks/08-your-own-loop.ipynb).
OWN_LOOP = """## Recording your own loop

A loop somatize did not write records the same run a `Trainer` does, so every reader (`runs`,
`progress`, `compare`, the run browser, `spent`, `somatize.diagnose`) reads it as one. One line each:

```python
rec = somatize.Recorder(store, run="mine")                  # a loop written by hand: the run
somatize.torch.watch(net, rec, optimizer=opt)               #   once: each layer's time and gradient health
rec.log({"loss": loss, "lr": lr})                           #   each step
lightning.Trainer(logger=somatize.lightning.Logger(store))  # Lightning
transformers.Trainer(..., callbacks=[somatize.transformers.Callback(store)])  # Hugging Face
```

Runs TensorBoard already holds come in with `somatize import tensorboard LOGDIR STORE`.
`notebooks/08-your-own-loop.ipynb` trains one CNN the first three ways into one store.
"""


def render():
    lines = ["# API reference", "",
             "Rendered from the docstrings by `scripts/apidoc.py`; do not edit by hand "
             "(`tests/test_api_reference.py` checks that it is current and that every public name has an entry).",
             "Forwards and steps count from 0 everywhere.", "", OWN_LOOP]
    for modname, about in MODULES.items():
        module = importlib.import_module(modname)
        lines += [f"## `{modname}`", "", about, ""]
        for name, obj, is_member in public_names(module):
            depth = "####" if is_member else "###"
            lines += [f"{depth} `{name}`", "", "```python", _signature(name, obj, is_member), "```", ""]
            doc = doc_of(obj)
            if doc:
                lines += [_text(doc), ""]
    lines += ["## The `somatize` command", "", "```text", cli_help(), "```", ""]
    return "\n".join(lines)


def main(argv=None):
    args = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    args.add_argument("--check", action="store_true", help="exit 1 if docs/API.md is not current")
    check = args.parse_args(argv).check
    text = render()
    if check:
        if not PAGE.exists() or PAGE.read_text() != text:
            print(f"{PAGE} is not current: run `.venv/bin/python scripts/apidoc.py`", file=sys.stderr)
            return 1
        return 0
    PAGE.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
