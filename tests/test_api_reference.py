"""docs/API.md, the API reference, has an entry for every public name and is
what scripts/apidoc.py renders from today's docstrings (issue 13)."""

import ast
import importlib.util
import inspect
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("apidoc", ROOT / "scripts" / "apidoc.py")
apidoc = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(apidoc)

PUBLIC = [(name, obj) for modname in apidoc.MODULES
          for name, obj, _ in apidoc.public_names(importlib.import_module(modname))]


def headings():
    return set(re.findall(r"^#{3,4} `([\w.]+)`$", apidoc.PAGE.read_text(), re.M))


def test_every_public_name_of_every_public_module_has_an_entry():
    missing = sorted({name for name, _ in PUBLIC} - headings())
    assert not missing, f"docs/API.md has no entry for {missing}: run `.venv/bin/python scripts/apidoc.py`"


def test_the_reference_has_no_entry_for_a_name_that_is_not_public():
    stale = sorted(headings() - {name for name, _ in PUBLIC})
    assert not stale, f"docs/API.md documents {stale}, which are not public names"


@pytest.mark.parametrize("name,obj", PUBLIC, ids=[n for n, _ in PUBLIC])
def test_every_public_name_says_what_it_does(name, obj):
    assert apidoc.doc_of(obj).strip(), f"{name} has no docstring, so its API entry says nothing"


def test_the_page_is_what_the_docstrings_render_today():
    assert apidoc.PAGE.read_text() == apidoc.render(), (
        "docs/API.md is not current: run `.venv/bin/python scripts/apidoc.py` and commit it")


def test_signatures_show_no_self_and_no_memory_addresses():
    text = apidoc.PAGE.read_text()
    code = "\n".join(re.findall(r"```python\n(.*?)\n```", text, re.S))
    assert "(self" not in code and " at 0x" not in code
    # a method's entry shows how a user calls it
    assert "#### `somatize.Store.keep`\n\n```python\nkeep(" in text
    assert inspect.signature(importlib.import_module("somatize").Store.keep).parameters.keys() >= {"self"}


def test_the_command_line_reference_is_the_parser_itself(capsys):
    from somatize import cli

    with pytest.raises(SystemExit):
        cli.parser().parse_args(["runs", "--help"])
    shown = capsys.readouterr().out
    assert "somatize runs" in shown and "store" in shown
    assert "usage: somatize check" in apidoc.PAGE.read_text()


def test_the_page_shows_how_to_record_a_loop_of_ones_own_with_calls_that_bind():
    """Issue 32: the one line each loop needs is on the page, and each somatize
    call it shows names a public entry and binds to today's signature."""
    text = apidoc.PAGE.read_text()
    own = text[text.index("## Recording your own loop"):text.index("## `somatize`")]
    for shown in ("rec.log(", "somatize.lightning.Logger(store)", "somatize.transformers.Callback(store)"):
        assert shown in own
    (code,) = re.findall(r"```python\n(.*?)\n```", own, re.S)
    called = []
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.Call):
            name = ast.unparse(node.func)
            if name.startswith("somatize."):
                called.append((name, node))
    assert {name for name, _ in called} == {"somatize.Recorder", "somatize.torch.watch", "somatize.lightning.Logger",
                                            "somatize.transformers.Callback"}
    assert {name for name, _ in called} | {"somatize.Recorder.log"} <= headings()
    for name, node in called:
        modname, attr = name.rsplit(".", 1)
        obj = getattr(importlib.import_module(modname), attr)
        inspect.signature(obj).bind(*node.args, **{k.arg: k.value for k in node.keywords})  # TypeError if not
    log = inspect.signature(importlib.import_module("somatize").Recorder.log)
    assert list(log.parameters)[:2] == ["self", "values"]
