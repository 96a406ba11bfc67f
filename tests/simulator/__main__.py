"""python -m tests.simulator: see tests.simulator.cli."""

import sys

from tests.simulator.cli import main

sys.exit(main())
