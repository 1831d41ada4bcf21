"""The driver spark-submit starts: the ``medallion`` command, from the wheel on --py-files."""

import sys

from framework.cli import main

if __name__ == "__main__":
    sys.exit(main())
