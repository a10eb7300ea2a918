"""python -m core generate|bench|lm-eval|lm-eval-task ...: see core/cli.py."""

import sys

from core.cli import main

sys.exit(main())
