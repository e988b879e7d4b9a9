"""What the real-browser tests share: Debian's Chromium and its flags, and a
real `jupyter lab` started for a test (with this checkout's lab extension and,
unless told otherwise, its server extension); with the server's route tests,
a run another process records step by step (``LIVE_CHILD``)."""

import contextlib
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ARTIFACTS = ROOT / "test-artifacts"
README_PICTURES = ROOT / "docs" / "screenshots"
CHROMIUM = "/usr/bin/chromium"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]
TOKEN = "somatize-browser-test"

# A run another process records (`live` in the store argv[1]): one step (a
# forward and its loss) per unit asked on stdin, then a flush, and it says how
# many steps it has: a test moves the run on, no clock involved.
LIVE_CHILD = r"""
import sys
from somatize import Recorder
r = Recorder(sys.argv[1], run="live")
step = 0
for line in sys.stdin:
    for _ in range(int(line)):
        r.forward_began()
        r({"fact": "ran", "node": "body", "began_us": 0, "took_us": 40})
        r({"fact": "finished", "took_us": 50})
        r({"fact": "loss", "value": 2.0 / (step + 1)})
        step += 1
    r.flush()
    print(step, flush=True)
r.close()
"""


def for_readme(shot, name):
    """Copy the screenshot ``shot`` to docs/screenshots/``name``, the picture the
    README shows: every run of the browser tests takes it again, so it shows
    the panels as they are."""
    README_PICTURES.mkdir(parents=True, exist_ok=True)
    (README_PICTURES / name).write_bytes(Path(shot).read_bytes())


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def running_lab(root, tmp_path, server_extension=True, settings=None):
    """A `jupyter lab` serving `root`, stopped on leaving; yields its URL.

    The run browser's lab extension is the one built in this checkout
    (somatize/labextension, by scripts/setup), found through JUPYTER_PATH;
    its server extension is enabled by a config file of this lab only, or
    left out (`server_extension=False`) to see what the sidebar says then.
    ``settings``: more of that file (``{"SomatizeApp": {"stores": [...]}}``)."""
    built = ROOT / "somatize" / "labextension"
    assert (built / "package.json").is_file(), "the lab extension is not built: run scripts/setup"
    data = tmp_path / "data"
    (data / "labextensions").mkdir(parents=True)
    os.symlink(built, data / "labextensions" / "somatize")
    config = tmp_path / "config"
    config.mkdir()
    (config / "jupyter_server_config.json").write_text(
        json.dumps({"ServerApp": {"jpserver_extensions": {"somatize._server": server_extension}}, **(settings or {})}))
    # the lab's settings (its theme) and workspaces stay in tmp_path, not in the home folder
    env = {**os.environ, "JUPYTER_CONFIG_DIR": str(config), "JUPYTER_RUNTIME_DIR": str(tmp_path / "rt"),
           "JUPYTER_PATH": str(data), "PYTHONPATH": str(ROOT),
           "JUPYTERLAB_SETTINGS_DIR": str(tmp_path / "settings"), "JUPYTERLAB_WORKSPACES_DIR": str(tmp_path / "ws")}
    with serving_lab([sys.executable, "-m", "jupyterlab"], root, env, tmp_path / "lab.log") as url:
        yield url


@contextlib.contextmanager
def serving_lab(command, root, env, log_path, root_dir=True):
    """`command` (a `jupyter lab`: any Python's) serving `root` on a free port
    with this module's token, with `env`; yields its URL once it answers, and
    stops it on leaving. `root_dir=False` leaves the root to the lab's own
    configuration (the lab still starts in `root`)."""
    port = free_port()
    log = open(log_path, "w")
    server = subprocess.Popen(
        [*command, "--no-browser", "--allow-root", f"--port={port}",
         "--ServerApp.ip=127.0.0.1", f"--IdentityProvider.token={TOKEN}",
         *([f"--ServerApp.root_dir={root}"] if root_dir else []),
         "--LabApp.news_url=", "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate"],
        cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(120):
            try:
                with urllib.request.urlopen(f"{url}/api/status?token={TOKEN}", timeout=2) as r:
                    json.load(r)
                break
            except OSError:
                if server.poll() is not None:
                    raise RuntimeError(Path(log_path).read_text()) from None
                time.sleep(0.5)
        yield url
    finally:
        server.terminate()
        try:
            server.wait(20)
        except subprocess.TimeoutExpired:  # a busy machine: stop it, and still reap it
            server.kill()
            server.wait()
        log.close()


def accept_kernel_dialog(page):
    """A "Select Kernel" dialog may come up once the page settles: accept it."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    accept = page.locator(".jp-Dialog button.jp-mod-accept")
    try:
        accept.first.wait_for(timeout=20_000)
        accept.first.click()
    except PlaywrightTimeout:
        pass


# ---- the run browser's sidebar, in a page -----------------------------------------------

# A JS function of a run's name element: whether the name is cut, its text
# running past what its own box or its name line shows. Measured on the text,
# as an inline box has no scroll width to compare.
NAME_CUT = r"""(n) => {
  const r = document.createRange();
  r.selectNodeContents(n);
  const shows = Math.min(n.getBoundingClientRect().right, n.closest('.smz-name-line').getBoundingClientRect().right);
  return r.getBoundingClientRect().right > shows + 0.5;
}"""


def open_sidebar(page, url, where="lab"):
    """Open the lab at ``where`` (``lab/tree/x.ipynb``: with that notebook),
    then the run browser's sidebar."""
    page.goto(f"{url}/{where}?token={TOKEN}")
    page.wait_for_selector(".jp-Notebook" if "/tree/" in where else ".jp-Launcher", timeout=90_000)
    page.add_style_tag(content=".Toastify { display: none !important; }")  # the news question, over the shots
    page.locator(".lm-TabBar-tab[data-id='somatize-sidebar']").click()
    page.locator("#somatize-sidebar").wait_for(timeout=30_000)


@contextlib.contextmanager
def sidebar_page(root, tmp_path, settings=None):
    """A page 1400 px wide in Debian's Chromium, on a `jupyter lab` serving
    ``root`` (``running_lab``, with ``settings``) with the run browser's
    sidebar open; closed on leaving. Yields the page."""
    from playwright.sync_api import sync_playwright

    assert Path(CHROMIUM).exists(), "no /usr/bin/chromium: run scripts/setup (apt-get install -y chromium)"
    with running_lab(root, tmp_path, settings=settings) as url, sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            open_sidebar(page, url)
            yield page
        finally:
            browser.close()


def theme(page, name, light):
    """Switch the lab to the theme ``name`` from its Settings menu."""
    page.locator(".lm-MenuBar-itemLabel", has_text="Settings").first.click()
    page.locator(".lm-Menu-itemLabel", has_text="Theme").first.click()
    page.locator(".lm-Menu-itemLabel", has_text=name).first.click()
    page.wait_for_selector(f"body[data-jp-theme-light='{str(light).lower()}']", state="attached", timeout=30_000)


def shoot(page, stem, readme=None):
    """Screenshots of the page 1400 and 800 px wide, to ``stem``-1400.png and
    ``stem``-800.png; the 1400 one also becomes the README's ``readme``."""
    Path(stem).parent.mkdir(parents=True, exist_ok=True)
    for width in (1400, 800):
        page.set_viewport_size({"width": width, "height": 900})
        page.wait_for_timeout(300)  # a frame for the layout to follow; the picture is for a person
        page.screenshot(path=f"{stem}-{width}.png")
        if readme and width == 1400:
            for_readme(f"{stem}-{width}.png", readme)


def open_two_runs(page, first, second):
    """Select runs ``first`` and ``second`` in the sidebar (a click, then a
    Ctrl-click) and open them; the panel, once it draws two curves with a
    legend naming both."""
    side = page.locator("#somatize-sidebar")
    side.locator(f"tr.smz-row[data-run='{first}']").click()
    side.locator(f"tr.smz-row[data-run='{second}']").click(modifiers=["Control"])
    side.locator("button", has_text="Open").click()
    panel = page.locator(".somatize-runs-panel").last
    panel.locator("svg.somatize-chart polyline.curve").nth(1).wait_for(timeout=30_000)
    assert panel.locator("svg.somatize-chart polyline.curve").count() == 2
    assert sorted(panel.locator(".somatize-legend .name").all_text_contents()) == sorted([first, second])
    return panel


def wait_for_findings_counted(page):
    """Wait (a guard, not a measurement) until every row of the sidebar that
    can be diagnosed shows its count of findings: the counts come later than
    the rows, from a thread of the server, and a count changes the layout."""
    page.wait_for_function(
        "() => [...document.querySelectorAll(\"#somatize-sidebar tr.smz-row:not([data-state='damaged'])\")]"
        ".every(r => r.querySelector(\"td[data-col='findings']\").dataset.count !== '')", timeout=60_000)
