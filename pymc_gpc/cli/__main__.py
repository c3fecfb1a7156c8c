"""``python -m pymc_gpc.cli``: the same as the ``pymc-gpc`` command."""

import sys

from .command import main

sys.exit(main())
