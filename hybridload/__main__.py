"""``python -m hybridload``: the command line."""

import sys

from hybridload.cli._commands import main

sys.exit(main())
