"""Running a notebook in the tests: one way, shared by every notebook test."""

import sys

from jupyter_client.kernelspec import KernelSpec
from nbclient import NotebookClient


def execute(nb, folder, timeout=300, python=sys.executable, env=None):
    """Run `nb` (in place, returned) in a kernel on `python` (this interpreter
    unless told), whatever kernelspecs the machine has, with `folder` as its
    working folder and `env` as its environment (this process's unless told).
    No widget state is kept: a saved notebook must show its static pictures."""
    client = NotebookClient(nb, timeout=timeout, kernel_name="python3", store_widget_state=False,
                            resources={"metadata": {"path": str(folder)}})
    client.km = client.kernel_manager_class(kernel_name="python3")
    client.km._kernel_spec = KernelSpec(argv=[str(python), "-m", "ipykernel_launcher", "-f", "{connection_file}"],
                                        display_name="test", language="python")
    client.execute(**({} if env is None else {"env": env}))
    return nb
