"""python -m core generate|bench|train ...: see core/cli.py."""

import sys

from core.cli import main

sys.exit(main())
