"""python -m training train ...: see training/cli.py."""

import sys

from training.cli import main

sys.exit(main())
