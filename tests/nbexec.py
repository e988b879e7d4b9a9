"""Running a notebook in the tests: one way, shared by every notebook test."""

import sys

from jupyter_client.kernelspec import KernelSpec
from nbclient import NotebookClient


def execute(nb, folder, timeout=300):
    """Run `nb` (in place, returned) in a kernel on this interpreter, whatever
    kernelspecs the machine has, with `folder` as its working folder. No
    widget state is kept: a saved notebook must show its static pictures."""
    client = NotebookClient(nb, timeout=timeout, kernel_name="python3", store_widget_state=False,
                            resources={"metadata": {"path": str(folder)}})
    client.km = client.kernel_manager_class(kernel_name="python3")
    client.km._kernel_spec = KernelSpec(argv=[sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
                                        display_name="test", language="python")
    client.execute()
    return nb
