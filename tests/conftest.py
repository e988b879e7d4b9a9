"""The order files run in: the slowest first.

scripts/test runs the suite on several processes (pytest-xdist with
``--dist loadfile``: a file's tests stay on one process, in file order,
sharing its module fixtures). Files are handed out in collection order, so a
long file collected late would run alone at the end while the other
processes sit idle; these start first. The order within a file is kept.
"""

SLOW_FIRST = ("test_ship.py", "test_binder.py", "test_browser.py", "test_sidebar.py")


def pytest_collection_modifyitems(items):
    rank = {name: i for i, name in enumerate(SLOW_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(SLOW_FIRST)))  # stable: a file's order is kept
