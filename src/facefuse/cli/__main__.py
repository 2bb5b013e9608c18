"""`python -m facefuse.cli` runs the same command as the `facefuse` script."""

import sys

from . import main

sys.exit(main())
