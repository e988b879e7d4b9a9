"""The install (``pip install -e .``, what scripts/setup runs) leaves both
halves of the run browser enabled: the prebuilt lab extension and the server
extension, as the venv's own `jupyter` commands report them."""

import re
import subprocess
import sys
from pathlib import Path

GUARD_S = 120  # a guard against a hang, not a measurement
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def listing(*args):
    jupyter = Path(sys.executable).parent / "jupyter"
    done = subprocess.run([str(jupyter), *args], capture_output=True, text=True, timeout=GUARD_S)
    return ANSI.sub("", done.stdout + done.stderr)


def test_the_lab_extension_is_installed_enabled_and_ok():
    out = listing("labextension", "list")
    ours = [line for line in out.splitlines() if line.split()[:1] == ["somatize"]]
    assert ours, f"`jupyter labextension list` does not list somatize (run scripts/setup):\n{out}"
    assert "enabled" in ours[0] and "OK" in ours[0], ours[0]


def test_the_server_extension_is_enabled_and_validates():
    out = listing("server", "extension", "list")
    assert re.search(r"somatize\._server\s+enabled", out), out
    assert re.search(r"somatize\._server\s+OK", out), out
