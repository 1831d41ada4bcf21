"""Run by spark-submit in tests: obtain the session the way a job does, then use Delta."""

from __future__ import annotations

import sys

from framework.cli import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
