"""``SomatizeApp``: the server extension as a jupyter_server ``ExtensionApp``,
so that it takes configuration the standard way (a ``jupyter_server_config.py``,
``jupyter_somatize_config.py``, or ``--SomatizeApp.stores=URL`` on the
command line, once a URL)::

    c.SomatizeApp.stores = ["s3://team/runs", "gs://lab-bucket/sweeps"]

Each URL is a store in a bucket, shown in the run browser beside the stores
found under the server's root (``_buckets``). Credentials come from the
server's environment and the client's usual configuration, as for
``Store(url)``: a URL holding any is refused, and none is ever sent to a page.
"""

from __future__ import annotations

from jupyter_server.extension.application import ExtensionApp
from traitlets import List, Unicode


class SomatizeApp(ExtensionApp):
    """The run browser's server half: its routes (``_handlers.ROUTES``) over
    the stores under the server's ``root_dir`` and the bucket stores ``stores``."""

    name = "somatize"

    stores = List(
        Unicode(),
        help="""Stores in buckets the run browser shows beside those under the server's root,
        by URL: s3://bucket/prefix, gs://bucket/prefix, az://container/prefix. Credentials come
        from the server's environment (AWS_ACCESS_KEY_ID, AWS_ENDPOINT_URL, ...), never from the
        URL; the page is sent the URL only. Their runs are read through a local mirror
        ($SOMATIZE_CACHE/mirror) and cannot be deleted from the browser.""",
    ).tag(config=True)

    def initialize_handlers(self):
        from ._handlers import setup

        serverapp = self.serverapp
        self.browser = setup(serverapp.web_app, serverapp.root_dir, list(self.stores))
        where = f" and {len(self.stores)} in buckets ({', '.join(w.url for w in self.browser.buckets)})" \
            if self.stores else ""
        self.log.info("somatize: run browser serving the stores under %s%s", serverapp.root_dir, where)
