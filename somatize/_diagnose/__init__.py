"""Diagnosis: opinions about a run's gradients, read from its record alone.

Public as ``somatize.diagnose(store, run=...)`` (a function; this package is
private so that the name ``somatize.diagnose`` means one thing). It owns the
findings and their thresholds (``_findings``) and how the record is read for
them (``_read``), and the panel a notebook shows them as (``_panel``, a
static picture drawn by ``_pictures``). It imports ``record`` (reads only),
``_pictures``, numpy and pandas; never torch: the instruments it reads are
recorded by ``somatize.torch``; never Jupyter.
"""

from ._findings import DEFAULTS as DEFAULTS
from ._findings import KINDS as KINDS
from ._findings import Finding as Finding
from ._findings import diagnose as diagnose
from ._read import curve as curve

__all__ = ["DEFAULTS", "KINDS", "Finding", "curve", "diagnose"]
