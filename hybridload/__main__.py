"""``python -m hybridload``: the command line."""

import sys

from hybridload.cli.main import main

sys.exit(main())
