"""The committed notebooks (01-08) are no larger than they need to be: a reader
downloads them from GitHub or Binder, and a diff of a re-executed notebook
should show what changed, not megabytes of pictures.

What a notebook legitimately holds besides its text: each panel's static
picture (an SVG as a base64 <img>, so that it survives JupyterLab's
sanitiser), short printed text and small tables. The bounds follow from that:

- a picture's curve has at most 2,000 points (the panels thin every curve to
  that); a point of an SVG polyline is about 12 bytes ("123.4,56.7 "), so
  24 KB, plus axes, ticks and labels (a few KB), times 4/3 for base64: about
  40 KB. One output of at most 64 KiB holds such a picture with room for a
  legend or a second small one; a curve that was not thinned (100k points:
  over 1 MB) or a raster screenshot does not fit.
- printed text: tqdm's bar is saved as its last state; 4 KiB is a screen
  of text, and more is a log dumped into the notebook.
- no saved widget state (it hides the static pictures in nbconvert, and is
  megabytes of model state), and no raster images (every picture of ours is
  an SVG; a PNG or JPEG is a screenshot or a plotting library's figure).
"""

import base64
import json
import re
from pathlib import Path

import pytest

NOTEBOOKS = sorted((Path(__file__).parent.parent / "notebooks").glob("[0-9][0-9]-*.ipynb"))
OUTPUT_BYTES = 64 * 1024
PICTURE_BYTES = 48 * 1024  # one decoded SVG: 2,000 points and its axes, with room
STREAM_BYTES = 4 * 1024
DATA_URI = re.compile(r"data:(image/[a-z+.-]+);base64,([A-Za-z0-9+/=]+)")
RASTER = ("image/png", "image/jpeg", "image/gif", "image/webp")


def outputs(nb):
    for i, cell in enumerate(nb["cells"]):
        for out in cell.get("outputs", []):
            yield i, out


def oversized(nb):
    """Each thing in `nb` beyond the bounds, said as (cell, what)."""
    found = []
    if "widgets" in nb.get("metadata", {}):
        found.append((None, "saved widget state in the notebook's metadata"))
    for i, out in outputs(nb):
        size = len(json.dumps(out).encode())
        if size > OUTPUT_BYTES:
            found.append((i, f"an output of {size:,} bytes (bound {OUTPUT_BYTES:,})"))
        data = out.get("data", {})
        if "application/vnd.jupyter.widget-state+json" in data:
            found.append((i, "widget state in an output"))
        for mime in RASTER:
            if mime in data:
                found.append((i, f"a raster picture ({mime})"))
        text = "".join(out.get("text", ""))
        if len(text.encode()) > STREAM_BYTES:
            found.append((i, f"{len(text.encode()):,} bytes of printed text (bound {STREAM_BYTES:,})"))
        for mime, payload in DATA_URI.findall(json.dumps(data)):
            if mime in RASTER:
                found.append((i, f"a raster picture inside HTML ({mime})"))
            elif len(base64.b64decode(payload)) > PICTURE_BYTES:
                found.append((i, f"a picture of {len(base64.b64decode(payload)):,} bytes (bound {PICTURE_BYTES:,})"))
    return found


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_a_committed_notebook_holds_no_more_than_its_pictures_need(path):
    assert oversized(json.loads(path.read_text())) == []


def test_the_tours_are_all_there():
    assert [p.name[:3] for p in NOTEBOOKS] == ["01-", "02-", "03-", "04-", "05-", "06-", "07-", "08-"]


def test_the_bounds_catch_what_they_are_for():
    """An unthinned curve, a screenshot, saved widget state and a dumped log are each caught."""
    points = " ".join(f"{i * 0.01:.1f},{i % 97:.1f}" for i in range(100_000))
    unthinned = base64.b64encode(f'<svg xmlns="http://www.w3.org/2000/svg"><polyline points="{points}"/></svg>'
                                 .encode()).decode()
    picture = f'<img src="data:image/svg+xml;base64,{unthinned}">'
    nb = {"metadata": {"widgets": {"application/vnd.jupyter.widget-state+json": {}}}, "cells": [
        {"cell_type": "code", "outputs": [
            {"output_type": "display_data", "data": {"text/html": picture}},
            {"output_type": "display_data", "data": {"image/png": "iVBORw0KGgo="}},
            {"output_type": "stream", "name": "stdout", "text": ["step 1\n"] * 2000},
        ]},
    ]}
    said = [what for _, what in oversized(nb)]
    assert said[0] == "saved widget state in the notebook's metadata"
    assert any(w.startswith("an output of") for w in said) and any(w.startswith("a picture of") for w in said)
    assert "a raster picture (image/png)" in said and any("printed text" in w for w in said)
