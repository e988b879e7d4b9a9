"""The install (``pip install -e .``, what scripts/setup runs) leaves both
halves of the run browser enabled: the prebuilt lab extension and the server
extension, as the venv's own `jupyter` commands report them; and the package
promises no Python and no torch the suite does not run on."""

import importlib.metadata
import re
import subprocess
import sys
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.version import Version

GUARD_S = 120  # a guard against a hang, not a measurement
ANSI = re.compile(r"\x1b\[[0-9;]*m")
ROOT = Path(__file__).parent.parent


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


def test_the_package_promises_the_python_and_torch_the_suite_runs_on_and_no_other():
    """requires-python and the torch extra admit this Python's and this
    torch's minor versions, and neither minor version on either side; the
    torch scripts/setup pins is inside the range."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    python = SpecifierSet(project["requires-python"])
    major, minor, micro = sys.version_info[:3]
    assert python.contains(f"{major}.{minor}.{micro}"), python
    assert not python.contains(f"{major}.{minor + 1}.0") and not python.contains(f"{major}.{minor - 1}.99"), python
    (torch,) = [r.specifier for r in map(Requirement, project["optional-dependencies"]["torch"]) if r.name == "torch"]
    here = Version(importlib.metadata.version("torch"))
    assert torch.contains(here), (torch, here)
    assert not torch.contains(f"{here.major}.{here.minor + 1}.0"), torch
    assert not torch.contains(f"{here.major}.{here.minor - 1}.0"), torch
    pinned = re.search(r'"torch==([^"]+)"', (ROOT / "scripts" / "setup").read_text()).group(1)
    assert torch.contains(pinned) and Version(pinned).release[:2] == here.release[:2], pinned
