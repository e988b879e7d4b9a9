"""The README's tour runs as written."""

import pathlib
import re

README = pathlib.Path(__file__).parent.parent / "README.md"


def test_the_tour_runs_and_says_what_it_claims(tmp_path, monkeypatch):
    code = re.search(r"```python\n(.*?)```", README.read_text(), re.S).group(1)
    monkeypatch.chdir(tmp_path)
    scope = {}
    exec(compile(code, str(README), "exec"), scope)
    from somatize.record import facts

    assert [f["fact"] for f in facts(scope["store"], run="first", forward=10)][:5] == [
        "ran", "ran", "finished", "updated", "loss"]
    assert len(scope["curve"](scope["store"], run="first", name="loss")) == 300
    assert scope["live"].steps == 300
    assert scope["somatize"].diagnose(scope["store"], run="first") == []  # as the tour says


def test_the_tour_shows_live_before_the_loop_it_watches():
    """Issue 9, item 4: `Live` is displayed before training, as people use it, not after the loop."""
    code = re.search(r"```python\n(.*?)```", README.read_text(), re.S).group(1)
    lines = [line.split("#")[0].strip() for line in code.splitlines()]
    assert lines.index("live") < next(i for i, line in enumerate(lines) if line.startswith("for "))
