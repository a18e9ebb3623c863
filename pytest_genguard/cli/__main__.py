"""``python -m pytest_genguard.cli``: the `genguard` console script without its entry point (CI runs it so)."""

import sys

from pytest_genguard.cli import main

sys.exit(main())
