"""The server half of the run browser: a jupyter_server extension serving the
stores and runs under the server's ``root_dir``, and the stores in buckets
its configuration names (``c.SomatizeApp.stores = ["s3://team/runs"]``), to
the sidebar (js/sidebar).

This layer sits on top: it imports the store and record layers, jupyter_server
and tornado; nothing in somatize imports it. ``_browse`` is the core (no
Jupyter in it); ``_handlers`` are thin tornado handlers over it, one route
table (``ROUTES``), every verb authenticated and authorised against the
resource ``somatize``; ``_app.SomatizeApp`` is the extension (an
``ExtensionApp``: its configuration is read the standard way). Loaded by
``jupyter-config/server-config/somatize.json`` (installed to
``etc/jupyter/jupyter_server_config.d``), or by hand with
``jupyter server extension enable somatize._server``.
"""

from __future__ import annotations

ENABLE = "jupyter server extension enable somatize._server"  # the fix the sidebar names


def _jupyter_server_extension_points():
    from ._app import SomatizeApp  # jupyter_server is imported only where a server loads this

    return [{"module": "somatize._server", "app": SomatizeApp}]
