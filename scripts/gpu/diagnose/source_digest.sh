#!/usr/bin/env bash
# A digest of the sources that shape a measurement (grader/, bench/, rubrics/, scripts/), from their bytes, not
# from git: on the lent machine the repository's .git may be older than the tree that was copied there.
cd "$(dirname "$0")/../../.." && find grader bench rubrics scripts -type f \( -name '*.py' -o -name '*.sh' -o -name '*.toml' \) \
  -not -path '*/__pycache__/*' | LC_ALL=C sort | xargs sha256sum | sha256sum | cut -c1-12
