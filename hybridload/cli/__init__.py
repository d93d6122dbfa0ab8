"""The command line: ``hybridload demo | profile | bench | index``.

``commands`` (the commands and ``main``), ``args`` (argument types, one-line user errors), ``tables``, ``plots``,
``bench`` (the bench command), ``profile`` (the profile command), ``index`` (the index command: shard
manifests) and ``demo_data`` (the demo's photo set).
"""

from hybridload.cli.commands import main

__all__ = ["main"]
