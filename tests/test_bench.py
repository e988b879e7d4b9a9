"""Every bench script still runs: each with ``--quick`` in a subprocess, and
it prints each target it answers beside a figure measured and its ratio
(``bench/common.target``). No figure is checked against its target here: a
suite run on a busy machine measures the machine; bench/RESULTS.md holds the
figures."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench"
ARGS = {"gpu_check.py": ["--device", "cpu"]}  # the checks of a lent GPU, run on the CPU
# The anchors run in a venv of their own, with the other tool installed (see
# each one's docstring): here they are only compiled.
ELSEWHERE = ("bench_mlflow.py", "bench_tensorboard.py")
SCRIPTS = sorted(p.name for p in BENCH.glob("*.py") if p.name not in ("common.py", *ELSEWHERE))
TARGET = re.compile(r"^target +(?P<what>.+?) +(?:<=|>=) +\S+(?: \S+)? +measured (?P<measured>.+)$", re.M)
RATIO = re.compile(r"\d+\.\d+x")


def test_every_script_is_listed():
    assert "bench_step.py" in SCRIPTS and len(SCRIPTS) >= 10


@pytest.mark.parametrize("script", ELSEWHERE)
def test_an_anchor_script_run_elsewhere_compiles(script):
    compile((BENCH / script).read_text(), script, "exec")


@pytest.mark.parametrize("script", SCRIPTS)
def test_a_bench_script_runs_and_prints_its_targets(script, tmp_path):
    done = subprocess.run([sys.executable, str(BENCH / script), "--quick", *ARGS.get(script, [])],
                          capture_output=True, text=True, timeout=900, cwd=BENCH.parent,
                          env={**os.environ, "TMPDIR": str(tmp_path)})
    assert done.returncode == 0, f"{script} --quick failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    targets = list(TARGET.finditer(done.stdout))
    assert targets, f"{script} printed no target line:\n{done.stdout[-3000:]}"
    for t in targets:
        assert RATIO.search(t["measured"]), f"{script}: no ratio measured for {t['what']!r}: {t.group(0)!r}"
