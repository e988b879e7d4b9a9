"""What a panel answers when displayed: its text and static picture always,
and its interactive view where anywidget is installed (`_views` imports it,
so a machine without it still gets the picture)."""


def panel_bundle(panel, view):
    """The mime bundle of ``panel`` (it has ``to_html()``): ``view()`` makes
    its widget, called only once ``_views`` imports."""
    bundle = {"text/plain": repr(panel), "text/html": panel.to_html()}
    try:
        from ._views import view_bundle
    except ImportError:
        return bundle
    bundle.update(view_bundle(view(), bundle["text/plain"]))
    return bundle
