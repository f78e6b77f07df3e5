"""``python -m parity``: the same as the ``parity`` console script."""

import sys

from parity.cli import main

if __name__ == "__main__":  # DataLoader workers may import this module again
    sys.exit(main())
