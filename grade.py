#!/usr/bin/env python3
"""Entry point: ``python grade.py ...`` does what the ``grade`` console script does."""

import sys

from grader.cli import main

if __name__ == "__main__":
    sys.exit(main())
