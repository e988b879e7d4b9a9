"""The run browser's bucket stores in a real JupyterLab in Debian's Chromium
(issue 33, item 4): ``c.SomatizeApp.stores`` names a store on moto's S3
server (tests/buckets.py) and a bucket that does not exist; the sidebar
shows the bucket store beside the local one (its heading a "bucket" badge
and its URL, cut in the middle where the sidebar is too narrow), its runs
as rows that open into the same panel as a local run's, Delete disabled
for them, and the missing bucket as a row naming its URL and the cause.
Nothing of the credentials reaches the page. Screenshots, light and dark,
1400 and 800 px wide, go to test-artifacts/sidebar-bucket/."""

import numpy as np
from buckets import ACCESS_KEY, SECRET_KEY
from labtools import ARTIFACTS, NAME_CUT, free_port, open_two_runs, shoot, sidebar_page, theme
from test_sidebar import record_run

from somatize import Store
from somatize._server._buckets import bucket_id
from somatize._server._discover import store_id

SHOTS = ARTIFACTS / "sidebar-bucket"
# Where the stores' headings and rows lie against the sidebar's box, and how the bucket's URL is drawn.
HEADINGS_JS = r"""sid => {
  const NAME_CUT = """ + NAME_CUT + r""";
  const side = document.querySelector('#somatize-sidebar');
  const box = side.getBoundingClientRect();
  const outside = [...side.querySelectorAll('h3.smz-store-name, .smz-store-problem, tr.smz-row')]
    .filter(e => { const r = e.getBoundingClientRect(); return r.left < box.left - 0.5 || r.right > box.right + 0.5; })
    .map(e => e.className);
  const h = side.querySelector(`section[data-store="${sid}"] h3`);
  const head = h.querySelector('.smz-url-head'), tail = h.querySelector('.smz-url-tail');
  const text = e => { const r = document.createRange(); r.selectNodeContents(e); return r.getBoundingClientRect(); };
  const hb = head.getBoundingClientRect(), tb = tail.getBoundingClientRect();
  const ht = text(head), tt = text(tail.querySelector('.smz-url-prefix'));
  return {outside,
          // the bucket cut at its end (its start shown), the prefix at its start (its end shown)
          head: {shown: hb.width, startShown: ht.left >= hb.left - 0.5, endCut: ht.right > hb.right + 0.5},
          tail: {shown: tb.width, startCut: tt.left < tb.left - 0.5, endShown: tt.right <= tb.right + 0.5},
          height: h.getBoundingClientRect().height,
          font: parseFloat(getComputedStyle(h).fontSize), badge: h.querySelector('.smz-badge').textContent};
}"""


def test_the_sidebar_shows_a_bucket_store_beside_a_local_one(tmp_path, s3_url, moto_endpoint, monkeypatch):
    monkeypatch.setenv("SOMATIZE_CACHE", str(tmp_path / "cache"))  # this machine's copies, the lab's too
    root = tmp_path / "root"
    steps = np.arange(300)
    local = Store(root / "experiments" / "store")
    record_run(local, "alpha", 2.5 * np.exp(-steps / 90) + 0.2)
    record_run(local, "beta", 2.8 * np.exp(-steps / 150) + 0.35)
    url = f"{s3_url}/team/experiments/image-classification"  # a URL longer than the sidebar is wide
    bucket = Store(url)
    record_run(bucket, "sweep-lr-0.1", 2.2 * np.exp(-steps / 60) + 0.1)
    record_run(bucket, "sweep-lr-0.01", 2.4 * np.exp(-steps / 200) + 0.3)
    missing = f"s3://somatize-never-made-{free_port()}/runs"
    sid, gone, here = bucket_id(url), bucket_id(missing), store_id("experiments/store")
    SHOTS.mkdir(parents=True, exist_ok=True)
    with sidebar_page(root, tmp_path, settings={"SomatizeApp": {"stores": [url, missing]}}) as page:
        side = page.locator("#somatize-sidebar")
        for run in ("alpha", "beta", "sweep-lr-0.1", "sweep-lr-0.01"):
            side.locator(f"tr.smz-row[data-run='{run}']").wait_for(timeout=60_000)
        order = side.locator("section.smz-store").evaluate_all("ss => ss.map(s => s.dataset.store)")
        assert order == [here, sid, gone]  # the local store, then the buckets as configured
        ours = side.locator(f"section[data-store='{sid}']")
        assert ours.locator("tr.smz-row").evaluate_all("rs => rs.map(r => r.dataset.run)") == \
            ["sweep-lr-0.01", "sweep-lr-0.1"]
        heading = ours.locator("h3.smz-store-name")
        assert heading.get_attribute("title").startswith(url + "\n")
        assert heading.locator(".smz-url").text_content() == url
        assert ours.locator("tr.smz-row[data-run='sweep-lr-0.1'] td[data-col='steps']").text_content() == "300"
        # the bucket that does not exist: a row naming its URL and why
        problem = side.locator(f"section[data-store='{gone}'] .smz-store-problem")
        assert problem.text_content().startswith(f"Store({missing!r}, readonly=True): not a store")
        assert side.locator(f"section[data-store='{gone}'] .smz-url").text_content() == missing
        assert side.locator(f"section[data-store='{gone}'] tr").count() == 0

        # a run of the bucket cannot be deleted from here; a local one can
        ours.locator("tr.smz-row[data-run='sweep-lr-0.1']").click()
        delete = side.locator("button", has_text="Delete")
        assert delete.is_disabled() and "read-only" in delete.get_attribute("title")
        side.locator("tr.smz-row[data-run='alpha']").click()
        assert delete.is_enabled()

        # at the panel's default width: every heading inside the sidebar, the URL cut in its middle on one line
        for width in (1400, 800):
            page.set_viewport_size({"width": width, "height": 900})
            page.wait_for_function(f"sid => ({HEADINGS_JS})(sid).outside.length === 0", arg=sid, timeout=30_000)
            got = page.evaluate(HEADINGS_JS, sid)
            assert got["head"]["startShown"] and got["head"]["endCut"] and got["head"]["shown"] > 30, got
            assert got["tail"]["startCut"] and got["tail"]["endShown"] and got["tail"]["shown"] > 60, got
            assert got["height"] < 2.2 * got["font"] and got["badge"] == "bucket", got

        # a bucket run and a local run overlaid in one panel, as two local runs are
        panel = open_two_runs(page, "alpha", "sweep-lr-0.1")
        assert panel.locator(".smz-bar-row[data-node='encoder']").count() == 2
        theme(page, "JupyterLab Light", True)
        shoot(page, SHOTS / "light")
        theme(page, "JupyterLab Dark", False)
        shoot(page, SHOTS / "dark")

        # what reached the page: the URLs, never a credential, the endpoint or this machine's copy
        html = page.content()
        for secret in (ACCESS_KEY, SECRET_KEY, moto_endpoint, str(tmp_path / "cache")):
            assert secret not in html, secret
