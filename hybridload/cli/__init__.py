"""The command line: ``hybridload demo | profile | bench | index | trace-summary``.

``commands`` (``main``, and one module per command: ``add_parser`` and ``run``), ``args``
(argument types, one-line user errors), ``tables``, ``plots``, ``results`` (what
profile and bench measured, as data), ``bench`` (the bench command's
runs), ``profile`` (the profile command's measuring), ``index`` (the index command's indexing:
shard manifests), ``trace_summary`` (the trace-summary command's reading of a loader trace),
``trace_png`` (its ``--png``: the trace's first seconds drawn, one row per worker) and
``demo_data`` (the demo's photo set).
"""

from hybridload.cli.commands import main

__all__ = ["main"]
