"""Static pictures: SVG and HTML drawn in Python, with no script and no
Jupyter, which every panel carries as its fallback and the diagnosis shows
as it is (what GitHub, nbviewer and nbconvert display).

The rule this layer keeps: it draws what it is handed (a chart's scale,
ticks and data from ``_chart``, bars, a graph's boxes) and reads nothing
itself. It sits above the record and below what shows pictures
(``_diagnose``, ``_widgets``, ``_server``), so they may import it. It
imports nothing of somatize.
"""
