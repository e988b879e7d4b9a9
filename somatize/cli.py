"""The command line: ``somatize runs STORE``, ``somatize check STORE`` and
``somatize import tensorboard LOGDIR STORE``.

The rule kept here: ``runs`` and ``check`` read, never write, and answer from
the summaries (no pandas, no facts decoded) so that listing a thousand runs
is instant. A run whose summary does not read is listed as "damaged", with
why below the table; the other runs list as ever. ``check`` reports and
never raises. ``import`` writes new runs only (``_import``), a line for
each as it is done. Exit status: 0 clean, 1 damage found (or a run imported
in part, or not), 2 a usage error.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from ._store.names import MARKER, store_root


def _store_path(text: str):
    """The store ``text`` names: a folder holding a marker (a ``Path``), or a
    bucket's URL (``s3://…``, ``gs://…``, ``az://…``: its text, opened later)."""
    from ._base.bucket import is_url

    if is_url(text):
        return text
    path = Path(text)
    if not path.is_dir():
        raise _Usage(f"{text}: no such folder; give the folder of a store (the one holding {MARKER})")
    try:
        store_root(path)
    except ValueError:
        raise _Usage(f"{text}: not a somatize store (no {MARKER} file in it); "
                     "give the folder a Store(path) made") from None
    return path


class _Usage(Exception):
    pass


def _ago(when, now) -> str:
    if not isinstance(when, (int, float)):
        return "-"
    seconds = max(0.0, now - when)
    for size, unit in ((86400, "d"), (3600, "h"), (60, "min")):
        if seconds >= size:
            return f"{seconds / size:.0f} {unit} ago"
    return f"{seconds:.0f} s ago"


def _number(value) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return "-" if value is None else str(value)


def _whole(value) -> str:
    return f"{value:,}" if isinstance(value, int) else _number(value)


SHOWN = 6  # summarised facts (and, apart, config keys) shown as columns; more would not fit a terminal
WIDE = 24  # characters of a config value shown; longer ones end in "…"


def _setting(value) -> str:
    """A config value in a cell: numbers as the other columns, the rest as JSON."""
    if isinstance(value, bool) or value is None:
        return "-" if value is None else str(value).lower()
    if isinstance(value, (int, float)):
        return _number(value)
    if isinstance(value, str):
        text = value
    else:
        import orjson

        text = orjson.dumps(value).decode()
    return text if len(text) <= WIDE else text[: WIDE - 1] + "…"


def runs_table(path, where=None) -> str:
    """The text ``somatize runs`` prints: one line per run; below the table,
    why each interrupted run was (its ``cause``) and why each damaged run
    is. Columns: the run, its state, counts, its config (``config.<key>``)
    and the last value of each summarised fact (``<fact>.last``), named as
    ``somatize.record.runs`` names them (``record/_columns``), and when it
    was updated. The runs are the store's table (``record/_table``, what
    ``runs()`` and the run browser list); ``where``: only the runs that
    query holds for (``record/_where``, asked of each run's row: numpy is
    not loaded; a query that does not read raises ``QueryError`` before
    anything is read). Linear in the runs and their summarised facts."""
    from ._base.bucket import is_url
    from .record import _table
    from .record._columns import QUERY_STATS, config_columns
    from .record._where import Query, matching

    query = None if where is None else Query(where)
    listed = _table.table(path if is_url(path) else Path(path), QUERY_STATS).listed  # a bucket's: its mirror
    if query is not None:
        listed = matching(listed, query, key=lambda got: got.row)
        if not listed:
            return f"no run in {path} matches {where!r}"
    rows = [got.summary for got in listed]  # shared with the table: read, never changed
    if not rows:
        return f"no runs in {path} yet"
    names: dict = {}
    keys: dict = {}
    configs = []
    for row_ in rows:
        for name in row_.get("summarising", {}):
            names.setdefault(name, None)
        configs.append(config_columns(row_.get("config") or {}))
        keys.update(dict.fromkeys(configs[-1]))
    more = max(0, len(names) - SHOWN)
    names = list(names)[:SHOWN]
    more_keys = max(0, len(keys) - SHOWN)
    keys = list(keys)[:SHOWN]
    now = time.time()
    head = ["run", "state", "forwards", "facts", *keys, *(f"{n}.last" for n in names), "updated"]
    lines = [head]
    for row_, config in zip(rows, configs):
        stats = row_.get("summarising", {})
        lines.append(
            [
                row_["run"],
                row_["state"],
                _whole(row_.get("forwards")),
                _whole(row_.get("facts")),
                *(_setting(config[k]) if k in config else "" for k in keys),
                *(_number(stats.get(n, {}).get("last")) for n in names),
                _ago(row_.get("updated"), now),
            ]
        )
    widths = [max(len(line[i]) for line in lines) for i in range(len(head))]
    right = {2, 3, *range(4, 4 + len(keys) + len(names))}
    out = [
        "  ".join(cell.rjust(w) if i in right else cell.ljust(w)
                  for i, (cell, w) in enumerate(zip(line, widths))).rstrip()
        for line in lines
    ]
    if more_keys:
        out.append(f"({more_keys:,} more config keys not shown: somatize.record.runs(store) has them all)")
    if more:
        out.append(f"({more:,} more summarised facts not shown: somatize.record.runs(store) has them all)")
    for row_ in rows:
        if "cause" in row_:
            out.append(f"interrupted: {row_['run']}: {row_['cause']}")
        if "problem" in row_:
            out.append(f"damaged: {row_['run']}: {row_['problem']} (`somatize check {path}` says more)")
    return "\n".join(out)


def _count(n, noun) -> str:
    return f"{n:,} {noun}" + ("" if n == 1 else "s")


def check_report(path) -> tuple[str, bool]:
    """The text ``somatize check`` prints, and whether the store is clean."""
    from ._base.bucket import is_url
    from ._base.errors import SomatizeError
    from ._store.check import count_objects
    from ._store.names import run_names
    from ._store.store import Store
    from .record._check import check_runs

    path = path if is_url(path) else Path(path)
    try:
        store = Store(path, readonly=True)
    except SomatizeError as e:  # a marker that is not one: report it, as any damage
        return f"problem: {e}\n1 problem in {path} (the store could not be opened)", False
    problems = store.check()
    if store.bucket is not None:  # its runs: fetched into this machine's mirror, each segment checked, and read
        from .record._mirror import check as check_bucket_runs

        run_problems, notes = check_bucket_runs(store)
        runs = len(store.runs())
    else:
        run_problems, notes = check_runs(path)
        runs = len(run_names(path))
    problems += run_problems
    checked = (
        f"{_count(count_objects(store), 'object')}, {_count(len(store.names()), 'name')}, "
        f"{_count(runs, 'run')}"
    )
    out = [f"problem: {p}" for p in problems] + [f"note: {n}" for n in notes]
    if problems:
        out.append(f"{_count(len(problems), 'problem')} in {path} ({checked} checked)")
    else:
        out.append(f"clean: {path} ({checked})")
    return "\n".join(out), not problems


def parser() -> argparse.ArgumentParser:
    """The command line, as `somatize --help` shows it (docs/API.md renders it too)."""
    out = argparse.ArgumentParser(prog="somatize",
                                  description="Look at a somatize store, or bring runs recorded elsewhere into one.")
    sub = out.add_subparsers(dest="command", required=True)
    listing = sub.add_parser("runs", help="list the runs of a store with their summaries and state",
                             description="List the runs of a store: state, forwards, steps, summaries, "
                             "configuration.")
    listing.add_argument("store", help="the store's folder, or its URL (s3://bucket/prefix, gs://…, az://…)")
    listing.add_argument("--where", metavar="QUERY", default=None,
                         help="only the runs this query holds for, e.g. --where 'config.lr < 1e-2 and "
                         "loss.best < 0.1' (columns: state, steps, duration, age, config.<key>, "
                         "<fact>.last|best|min|max; and, or, not, in [...])")
    sub.add_parser("check", help="verify every object and every run's record",
                   description="Re-hash every object and read every record of a store; exit 1 naming "
                   "what is damaged. Reports, never raises.").add_argument("store", help="the store's folder")
    bring = sub.add_parser("import", help="bring runs recorded by another tool into a store",
                           description="Bring runs recorded by another tool into a store, each as a finished "
                           "run. Writes new runs only: a run imported before is skipped.")
    tools = bring.add_subparsers(dest="tool", required=True, metavar="TOOL")
    tensorboard = tools.add_parser(
        "tensorboard", help="TensorBoard's event files: each folder holding them becomes a run",
        description="Each folder under LOGDIR holding TensorBoard event files (*tfevents*) becomes a "
        "finished run, named from its path (exp1/lr0.1: exp1-lr0.1): its scalars as facts on their steps, "
        "their wall times as wall_s, its hparams as its config. Prints a line a folder (imported, partial, "
        "skipped, failed; a link or FIFO: not read) and a total; exit 1 when a run was imported in part "
        "(an event file cut short: the file and the byte offset named) or failed. Follows no link below "
        "LOGDIR. Needs somatize[tensorboard]; never TensorFlow.")
    tensorboard.add_argument("logdir", help="the folder TensorBoard's --logdir was given")
    tensorboard.add_argument("store", help="the store's folder (made when missing)")
    return out


def import_lines(logdir, store, out=print) -> int:
    """``somatize import tensorboard``: ``out`` a line per folder as it is
    done (``_import.tensorboard.imports``), then the total; the exit status
    (0 all imported or skipped, 1 a run partial or failed)."""
    from ._import.tensorboard import OUTCOMES, imports

    counts = dict.fromkeys(OUTCOMES, 0)
    steps = points = 0
    for outcome in imports(logdir, store):
        out(str(outcome))
        counts[outcome.outcome] += 1
        steps += outcome.steps
        points += outcome.points
    folders = sum(n for what, n in counts.items() if what != "not read")
    said = ", ".join(f"{n:,} {what}" for what, n in counts.items() if n)
    out(f"{_count(folders, 'folder')} of event files: {said}; {_count(points, 'point')} on "
        f"{_count(steps, 'step')} imported into {store}")
    return 1 if counts["partial"] or counts["failed"] else 0


def main(argv=None) -> int:
    try:
        args = parser().parse_args(argv)
    except SystemExit as e:
        return int(e.code or 0)
    if args.command == "import":
        return _import(args)
    try:
        path = _store_path(args.store)
    except _Usage as e:
        print(f"somatize {args.command}: {e}", file=sys.stderr)
        return 2
    from ._base.errors import QueryError, SomatizeError

    if args.command == "runs":
        try:
            print(runs_table(path, args.where))
        except QueryError as e:  # a usage error: the question, not the store
            print(f"somatize runs: {e}", file=sys.stderr)
            return 2
        except SomatizeError as e:
            print(f"somatize runs: {e}", file=sys.stderr)
            return 1
        return 0
    try:
        report, clean = check_report(path)
    except SomatizeError as e:
        print(f"problem: {e}\n1 problem in {path}", file=sys.stdout)
        return 1
    print(report)
    return 0 if clean else 1


def _import(args) -> int:
    from ._base.errors import SomatizeError

    try:
        return import_lines(args.logdir, args.store, lambda line: print(line, flush=True))
    except SomatizeError as e:  # LOGDIR or STORE refused before anything was written
        print(f"somatize import {args.tool}: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"somatize import {args.tool}: stopped (ctrl-C): the runs done before are kept, nothing of the "
              "one being read or written is; run it again to go on", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
