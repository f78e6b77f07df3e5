"""``python -m parity``: the same as the ``parity`` console script."""

from parity.cli import console

if __name__ == "__main__":  # DataLoader workers may import this module again
    console()
