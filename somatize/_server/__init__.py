"""The server half of the run browser: a jupyter_server extension serving the
stores and runs under the server's ``root_dir`` to the sidebar (js/sidebar).

This layer sits on top: it imports the store and record layers, jupyter_server
and tornado; nothing in somatize imports it. ``_browse`` is the core (no
Jupyter in it); ``_handlers`` are thin tornado handlers over it, one route
table (``ROUTES``), every verb authenticated and authorised against the
resource ``somatize``. Loaded by ``jupyter-config/server-config/somatize.json``
(installed to ``etc/jupyter/jupyter_server_config.d``), or by hand with
``jupyter server extension enable somatize._server``.
"""

from __future__ import annotations

ENABLE = "jupyter server extension enable somatize._server"  # the fix the sidebar names


def _jupyter_server_extension_points():
    return [{"module": "somatize._server"}]


def _load_jupyter_server_extension(serverapp):
    from ._handlers import setup

    setup(serverapp.web_app, serverapp.root_dir)
    serverapp.log.info("somatize: run browser serving the stores under %s", serverapp.root_dir)
