"""python -m training train|recipe ...: see training/cli.py."""

import sys

from training.cli import main

sys.exit(main())
