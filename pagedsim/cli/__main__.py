"""``python -m pagedsim.cli``: the same command line as ``pagedsim``."""

import sys

from . import main

if __name__ == "__main__":
    sys.exit(main())
