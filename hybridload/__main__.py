"""``python -m hybridload``: the command line."""

import sys

from hybridload.cli.commands import main

sys.exit(main())
