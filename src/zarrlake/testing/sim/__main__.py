"""python -m zarrlake.testing.sim: see zarrlake.testing.sim.cli."""

import sys

from zarrlake.testing.sim.cli import main

sys.exit(main())
