"""`python -m facefuse` runs the `facefuse` command."""

import sys

from .cli import main

sys.exit(main())
