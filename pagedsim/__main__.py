"""``python -m pagedsim``: the same command line as the ``pagedsim`` console script."""

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
