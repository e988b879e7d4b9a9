"""The run browser's time view (js/sidebar/ranks.ts) in a real JupyterLab
and Chromium: a data-parallel run shows each rank's own work a step side by
side, the straggler's bar apart and the straggler named, in the numbers and
words `spent` says for the same run (both read record/_ranks.py); a run of
one process shows no ranks. Screenshots, light and dark, 1400 and 800 px
wide, go to test-artifacts/sidebar-ranks/."""

import re
from pathlib import Path

from labtools import ARTIFACTS, CHROMIUM, open_two_runs, shoot, sidebar_page, theme

from somatize import Recorder, Store
from somatize._pictures import _svg
from somatize._widgets._spent import RANKS_TITLE
from somatize.record import spent

SHOTS = ARTIFACTS / "sidebar-ranks"
MEAN_US = {0: 1000, 1: 1300, 2: 1100}  # each rank's own µs a step, chosen (no clock)

# Each run's box in the time view as drawn: its title, its rank rows (name,
# text, whether marked the straggler, the bar's colour) and the sentence.
RANKS_JS = r"""panel => [...panel.querySelectorAll('.smz-spent-run')].map(box => ({
  run: box.querySelector('.smz-spent-title').textContent,
  title: box.querySelector('.smz-ranks-title')?.textContent ?? null,
  ranks: [...box.querySelectorAll('.smz-rank-row')].map(r => ({
    name: r.querySelector('.smz-bar-name').textContent,
    text: r.querySelector('.smz-bar-text').textContent,
    straggler: r.dataset.straggler === 'true',
    bold: getComputedStyle(r.querySelector('.smz-bar-name')).fontWeight >= 600,
    color: getComputedStyle(r.querySelector('.smz-bar')).backgroundColor,
    width: r.querySelector('.smz-bar').getBoundingClientRect().width,
  })),
  said: box.querySelector('.smz-straggler')?.textContent ?? null,
  warn: (() => {  // the theme's warning colour, as computed
    const probe = document.createElement('span');
    probe.style.color = 'var(--jp-warn-color1)';
    box.appendChild(probe);
    const color = getComputedStyle(probe).color;
    probe.remove();
    return color;
  })(),
}))"""


def record(store, run, ranks, before=None):
    """A run of 12 steps; ``ranks``: each rank's µs a step in its step,
    ``before``: each rank's µs before it (a run that says it)."""
    with Recorder(store, run=run) as rec:
        if ranks:
            rec({"fact": "ranks", "value": len(ranks)})
        for i in range(12):
            rec.forward_began()
            rec({"fact": "ran", "node": "body", "began_us": 0, "took_us": 400})
            rec({"fact": "ran", "node": "head", "began_us": 400, "took_us": 100})
            rec({"fact": "finished", "took_us": 520})
            rec({"fact": "loss", "value": (2.0 if ranks else 2.4) / (i + 1)})
            for rank, us in ranks.items():
                rec({"fact": "rank_us", "rank": rank, "value": 99_999 if i == 0 else us + i % 3})  # step 0: warm-up
            for rank, us in (before or {}).items():
                rec({"fact": "rank_before_us", "rank": rank, "value": us})


def test_a_data_parallel_runs_time_per_rank_and_its_straggler_as_spent_says_them(tmp_path):
    assert Path(CHROMIUM).exists(), "no /usr/bin/chromium: run scripts/setup (apt-get install -y chromium)"
    root = tmp_path / "root"
    store = Store(root / "store")
    record(store, "ddp", MEAN_US)
    record(store, "alone", {})
    want = spent(store, run="ddp")
    assert [r["rank"] for r in want.ranks] == [0, 1, 2] and want.straggler["rank"] == 1
    with sidebar_page(root, tmp_path) as page:
        panel = open_two_runs(page, "ddp", "alone")
        panel.locator(".smz-rank-row").first.wait_for(timeout=30_000)
        assert panel.locator(".smz-spent h3").text_content() == "Where the time went, per node and per rank"
        boxes = {b["run"]: b for b in panel.evaluate(RANKS_JS)}
        alone, ddp = boxes["alone"], boxes["ddp"]
        assert alone["ranks"] == [] and alone["title"] is None and alone["said"] is None  # one process: no ranks
        assert ddp["title"] == RANKS_TITLE
        # side by side, in rank order, each rank's mean a step as spent computes it (warm-up left out)
        assert [r["name"] for r in ddp["ranks"]] == ["rank 0", "rank 1", "rank 2"]
        micros = {0: "1 ms", 1: "1.3 ms", 2: "1.1 ms"}  # 1000-1002, 1300-1302, 1100-1102 µs: mean +1
        for r, told in zip(want.ranks, ddp["ranks"]):
            assert told["text"] == f"{_svg_duration(r['mean_us'])} a step" == f"{micros[r['rank']]} a step"
        assert [r["straggler"] for r in ddp["ranks"]] == [False, True, False]
        assert [r["bold"] for r in ddp["ranks"]] == [False, True, False]
        colors = [r["color"] for r in ddp["ranks"]]
        assert colors[1] == ddp["warn"] != colors[0] == colors[2]  # the straggler's bar in the warning colour
        widths = [r["width"] for r in ddp["ranks"]]
        assert widths[1] == max(widths) and widths[0] < widths[2] < widths[1]
        # the straggler named in spent's own words
        assert ddp["said"] in repr(want)
        assert ddp["said"].startswith("rank 1 is the straggler: its steps take 1.3 ms, 300 µs (30%) more than "
                                      "rank 0's")
        panel.locator(".smz-spent").scroll_into_view_if_needed()
        shoot(page, str(SHOTS / "light"))
        theme(page, "JupyterLab Dark", light=False)
        panel.locator(".smz-spent").scroll_into_view_if_needed()
        dark = {b["run"]: b for b in panel.evaluate(RANKS_JS)}["ddp"]
        assert dark["ranks"][1]["color"] == dark["warn"] != dark["ranks"][0]["color"] and dark["said"] == ddp["said"]
        shoot(page, str(SHOTS / "dark"))


def _svg_duration(us):
    from somatize._pictures._svg import duration_us

    return duration_us(us)


DAMAGED_JS = r"""panel => {
  const box = [...panel.querySelectorAll('.smz-spent-run')]
    .find(b => b.querySelector('.smz-spent-title').textContent === 'ddp');
  const said = box.querySelector('.smz-ranks-problem');
  const probe = document.createElement('span');  // the theme's error colour, as computed
  probe.style.color = 'var(--jp-error-color1)';
  box.appendChild(probe);
  const error = getComputedStyle(probe).color;
  probe.remove();
  return {
    nodes: [...box.querySelectorAll('.smz-bar-row[data-node]')].map(r => r.dataset.node),
    ranks: box.querySelectorAll('.smz-rank-row').length,
    title: box.querySelector('.smz-ranks-title')?.textContent ?? null,
    said: said?.textContent ?? null,
    color: said ? getComputedStyle(said).color : null,
    error,
    inside: said ? said.getBoundingClientRect().right <= box.getBoundingClientRect().right + 1 : null,
  };
}"""


def test_a_run_whose_rank_series_is_damaged_shows_its_nodes_and_says_what_is_damaged(tmp_path):
    """A rank series whose bytes no longer match their checksum: the time
    view still draws the run's nodes, draws no rank from the damaged bytes,
    and says in the theme's error colour which file does not verify (the
    nodes route's ranks_problem; the route answered 422 for all of it)."""
    assert Path(CHROMIUM).exists(), "no /usr/bin/chromium: run scripts/setup (apt-get install -y chromium)"
    root = tmp_path / "root"
    store = Store(root / "store")
    record(store, "ddp", MEAN_US)
    record(store, "alone", {})
    series = root / "store" / "runs" / "ddp" / "series" / "rank_us%2Frank1.bin"
    data = bytearray(series.read_bytes())
    data[-1] ^= 0xFF
    series.write_bytes(bytes(data))
    with sidebar_page(root, tmp_path) as page:
        panel = open_two_runs(page, "ddp", "alone")
        panel.locator(".smz-ranks-problem").wait_for(timeout=30_000)
        got = panel.evaluate(DAMAGED_JS)
        assert got["nodes"] == ["body", "head"] and got["ranks"] == 0
        assert got["title"] == RANKS_TITLE
        assert got["said"].startswith("Not shown: run 'ddp': ") and "rank_us%2Frank1.bin does not verify" in got["said"]
        assert str(root) not in got["said"]  # the server's paths are not the reader's business
        assert got["color"] == got["error"] and got["inside"]
        panel.locator(".smz-ranks-problem").scroll_into_view_if_needed()
        shoot(page, str(SHOTS / "damaged-light"))
        theme(page, "JupyterLab Dark", light=False)
        panel.locator(".smz-ranks-problem").scroll_into_view_if_needed()
        dark = panel.evaluate(DAMAGED_JS)
        assert dark["color"] == dark["error"] and dark["said"] == got["said"]
        shoot(page, str(SHOTS / "damaged-dark"))


def test_spent_of_a_damaged_rank_series_in_chromium_draws_the_nodes_and_names_the_damage(tmp_path):
    """spent's static picture (what GitHub, nbviewer and nbconvert show) of
    the same damaged run, in Chromium at 1400 and 800 px: the nodes' bars
    drawn, no rank bar, and the damage said in the error colour inside the
    panel's frame, not under or past it. It raised DamagedError before."""
    from labtools import FLAGS
    from playwright.sync_api import sync_playwright

    assert Path(CHROMIUM).exists(), "no /usr/bin/chromium: run scripts/setup (apt-get install -y chromium)"
    store = Store(tmp_path / "store")
    record(store, "ddp", MEAN_US)
    series = tmp_path / "store" / "runs" / "ddp" / "series" / "rank_us%2Frank1.bin"
    data = bytearray(series.read_bytes())
    data[-1] ^= 0xFF
    series.write_bytes(bytes(data))
    html = spent(store, run="ddp").to_html()
    fallback = re.search(r"#([0-9a-f]{6})\)$", _svg.BAD).group(1)
    bad = "rgb({}, {}, {})".format(*(int(fallback[k:k + 2], 16) for k in (0, 2, 4)))
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        try:
            page = browser.new_page()
            page.route("http*://**", lambda route: route.abort())  # offline, as nbconvert's HTML is read
            page.set_content(f"<!doctype html><meta charset='utf-8'><body>{html}</body>")
            for width in (1400, 800):
                page.set_viewport_size({"width": width, "height": 1000})
                got = page.evaluate(r"""() => {
                  const frame = document.querySelector('.somatize-static').getBoundingClientRect();
                  const said = document.querySelector('.smz-ranks-problem');
                  const box = said.getBoundingClientRect();
                  const pics = [...document.querySelectorAll('img.somatize-picture')];
                  return {said: said.textContent, color: getComputedStyle(said).color,
                          inside: box.left >= frame.left && box.right <= frame.right && box.bottom <= frame.bottom,
                          drawn: pics.filter(i => i.complete && i.naturalWidth > 0).length,
                          labels: pics.map(i => i.alt || i.getAttribute('aria-label') || '')};
                }""")
                assert got["said"].startswith("Not shown: run 'ddp': ")
                assert "rank_us%2Frank1.bin does not verify" in got["said"]
                assert got["color"] == bad  # _svg.BAD's own colour where no theme defines its variable
                assert got["inside"], got
                assert got["drawn"] >= 2  # the nodes' bars and the forward's timeline
                assert "ranks" not in got["labels"]  # no rank bars drawn from the damaged bytes
                SHOTS.mkdir(parents=True, exist_ok=True)
                page.screenshot(path=str(SHOTS / f"spent-damaged-static-{width}.png"), full_page=True)
            series.write_bytes(bytes(data[:-1]) + bytes([data[-1] ^ 0xFF]))  # mended: the rank bars are back
            page.set_content(f"<!doctype html><meta charset='utf-8'><body>{spent(store, run='ddp').to_html()}</body>")
            alts = page.evaluate("() => [...document.querySelectorAll('img.somatize-picture')].map(i => i.alt)")
            assert "ranks" in alts and page.locator(".smz-ranks-problem").count() == 0
        finally:
            browser.close()


BEFORE_JS = r"""panel => {
  const box = [...panel.querySelectorAll('.smz-spent-run')]
    .find(b => b.querySelector('.smz-spent-title').textContent === 'loader');
  return [...box.querySelectorAll('.smz-rank-row')].map(r => {
    const bar = r.querySelector('.smz-bar').getBoundingClientRect().width;
    const part = r.querySelector('.smz-bar-before');
    return {tip: r.title, share: part ? part.getBoundingClientRect().width / bar : null};
  });
}"""


def test_a_rank_slow_at_loading_its_data_is_named_and_its_bar_shows_the_time_before_its_step(tmp_path):
    """A run that says each rank's time before its step (rank_before_us): the
    time view names the straggler in the very sentence spent says (its time
    before its step included), and each rank's bar shows that part apart."""
    assert Path(CHROMIUM).exists(), "no /usr/bin/chromium: run scripts/setup (apt-get install -y chromium)"
    root = tmp_path / "root"
    store = Store(root / "store")
    record(store, "loader", {0: 1000, 1: 1000}, before={0: 100, 1: 45_000})
    record(store, "alone", {})
    want = spent(store, run="loader")
    assert want.straggler["rank"] == 1 and want.straggler["before_us"] == 45_000
    with sidebar_page(root, tmp_path) as page:
        panel = open_two_runs(page, "loader", "alone")
        panel.locator(".smz-rank-row").first.wait_for(timeout=30_000)
        said = panel.locator(".smz-straggler").text_content()
        assert said in repr(want)  # spent's own sentence, word for word
        assert said.startswith("rank 1 is the straggler: its steps take 46 ms, 41.8 times rank 0's, 45 ms of each "
                               "before it began (loading its data")
        rows = panel.evaluate(BEFORE_JS)
        for got, rank in zip(rows, want.ranks):  # the part before its step, as a share of the bar
            assert abs(got["share"] - rank["before_us"] / rank["mean_us"]) < 0.02, (got, rank)
            assert "before the step began" in got["tip"] and "waits" in got["tip"]
        panel.locator(".smz-spent").scroll_into_view_if_needed()
        shoot(page, str(SHOTS / "before-light"))
        theme(page, "JupyterLab Dark", light=False)
        shoot(page, str(SHOTS / "before-dark"))
