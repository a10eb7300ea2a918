"""python -m evaluation generate|bench|lm-eval|lm-eval-task ...: see evaluation/cli/."""

import sys

from evaluation.cli import main

sys.exit(main())
