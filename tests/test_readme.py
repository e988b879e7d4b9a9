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

    shown = [f["fact"] for f in facts(scope["store"], run="first", forward=20)]
    assert shown[:5] == ["ran", "ran", "finished", "updated", "loss"]
    # "the step's clocks", then the learning rate the update used
    assert shown[5:] == ["wall_s", "objective_us", "backward_us", "update_us", "lr", "trainer_us"]
    assert len(scope["curve"](scope["store"], run="first", name="loss")) == 300
    assert scope["live"].steps == 300
    assert scope["somatize"].diagnose(scope["store"], run="first") == []  # as the tour says


def test_the_tour_shows_live_before_the_loop_it_watches():
    """Issue 9, item 4: `Live` is displayed before training, as people use it, not after the loop."""
    code = re.search(r"```python\n(.*?)```", README.read_text(), re.S).group(1)
    lines = [line.split("#")[0].strip() for line in code.splitlines()]
    assert lines.index("live") < next(i for i, line in enumerate(lines) if line.startswith("for "))


def test_every_file_the_readme_names_or_shows_is_in_the_repository():
    """Images, docs, notebooks and scripts the README points a newcomer at exist."""
    text = README.read_text()
    root = README.parent
    linked = re.findall(r"\]\(([^)#\s]+)\)", text)  # markdown links and images
    named = re.findall(r"`((?:docs|notebooks|scripts|tests|bench|binder|js)/[\w./-]+)`", text)
    assert any(p.endswith(".png") for p in linked) and any(p.startswith("notebooks/") for p in named)
    missing = [p for p in linked + named if not (root / p).exists()]
    assert not missing, f"README.md names files that are not there: {missing}"


def test_the_tour_walks_every_committed_notebook_in_order():
    text = README.read_text()
    tour = text[text.index("## A ten-minute tour"):]
    notebooks = sorted(p.name for p in (README.parent / "notebooks").glob("*.ipynb"))
    at = [tour.find(name) for name in notebooks]
    assert -1 not in at, f"the tour skips {[n for n, i in zip(notebooks, at) if i < 0]}"
    assert at == sorted(at)
