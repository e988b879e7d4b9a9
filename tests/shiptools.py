"""What tests/test_ship.py and tests/test_binder.py share: fresh venvs with no
build tool on their PATH, a fresh copy of the checkout, and the checks of
what a lab installed there lists and serves."""

import json
import os
import re
import shutil
import subprocess
import sys
import urllib.request

from labtools import ROOT, TOKEN

GUARD_S = 1200  # pip on a busy machine; a guard against a hang, not a measurement
ANSI = re.compile(r"\x1b\[[0-9;]*m")
NOTEBOOKS = sorted(p.name for p in (ROOT / "notebooks").glob("0[1-6]-*.ipynb"))
# what only a build needs, and what a lab installed from a wheel must not find
BUILD_TOOLS = {"node", "nodejs", "npm", "npx", "yarn", "jlpm"}


def run(argv, env, cwd=None, timeout=GUARD_S, stdout_only=False):
    """The command's output (stdout, then stderr; or stdout alone), once it
    has exited 0."""
    done = subprocess.run([str(a) for a in argv], env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    out = ANSI.sub("", done.stdout + done.stderr)
    assert done.returncode == 0, f"{' '.join(map(str, argv))} failed ({done.returncode}):\n{out[-6000:]}"
    return ANSI.sub("", done.stdout) if stdout_only else out


def outside_env(**extra):
    """This process's environment without what points Python at this checkout
    or at another venv; pip's own settings (indexes, cache) stay."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    return {**env, **extra}


def fresh_copy(dest):
    """This checkout's files as a fresh clone has them (tracked, and new ones
    git does not ignore; no .venv, node_modules or built extension)."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                            capture_output=True, check=True, timeout=120).stdout.decode().split("\0")
    for rel in filter(None, listed):
        src = ROOT / rel
        if src.is_file():  # a file deleted but not yet committed is listed and absent
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)
    return dest


class Venv:
    """A fresh venv, and a PATH for it that holds no build tool: a folder of
    links to its commands but node, npm, jlpm and the like (and no python:
    every call names the venv's own)."""

    def __init__(self, path):
        run([sys.executable, "-m", "venv", path], outside_env())
        self.path = path
        self.python = path / "bin" / "python"
        self.home = path.parent / f"{path.name}-home"
        self.home.mkdir()
        self.extras = []

    def install(self, *requirements):
        run([self.python, "-m", "pip", "install", "--disable-pip-version-check", "-q", *requirements], outside_env())

    def no_build_tools_env(self):
        tools = self.path.parent / f"{self.path.name}-path"
        shutil.rmtree(tools, ignore_errors=True)
        tools.mkdir()
        for command in (self.path / "bin").iterdir():
            if command.name not in BUILD_TOOLS and not command.name.startswith(("python", "activate")):
                (tools / command.name).symlink_to(command)
        j = self.home / "jupyter"
        return {"PATH": str(tools), "HOME": str(self.home), "LANG": "C.UTF-8",
                "JUPYTER_CONFIG_DIR": str(j / "config"), "JUPYTER_DATA_DIR": str(j / "data"),
                "JUPYTER_RUNTIME_DIR": str(j / "runtime"), "JUPYTERLAB_SETTINGS_DIR": str(j / "settings"),
                "JUPYTERLAB_WORKSPACES_DIR": str(j / "workspaces"), "IPYTHONDIR": str(self.home / "ipython")}

    def py(self, code, cwd=None):
        """Run `code` on the venv's Python with no build tool on PATH; its
        stdout's last line, as JSON. Only stdout: what a library logs to stderr
        as it shuts down (Dask's cluster on a busy machine logs a TimeoutError
        after the answer is printed, and exits 0) is not the answer."""
        out = run([self.python, "-c", code], self.no_build_tools_env(), cwd=cwd, stdout_only=True)
        lines = out.strip().splitlines()
        assert lines, f"{code!r} printed nothing on stdout"
        return json.loads(lines[-1])

    def jupyter(self, *args):
        return run([self.path / "bin" / "jupyter", *args], self.no_build_tools_env())


def extension_listings(jupyter):
    """(our line of `jupyter labextension list`, `jupyter server extension list`)."""
    labs = jupyter("labextension", "list")
    ours = [line for line in labs.splitlines() if line.split()[:1] == ["somatize"]]
    assert ours, f"`jupyter labextension list` does not list somatize:\n{labs}"
    return ours[0], jupyter("server", "extension", "list")


def assert_both_extensions_enabled_and_ok(jupyter):
    lab, server = extension_listings(jupyter)
    assert "enabled" in lab and "OK" in lab, lab
    assert re.search(r"somatize\._server\s+enabled", server), server
    assert re.search(r"somatize\._server\s+OK", server), server


def get(url, path):
    with urllib.request.urlopen(urllib.request.Request(f"{url}{path}", headers={"Authorization": f"token {TOKEN}"}),
                                timeout=60) as r:
        return json.load(r)
