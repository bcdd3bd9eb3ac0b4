#!/usr/bin/env python3
"""steptrace-ctl without installing the Python package: runs steptrace.ctl (python/steptrace/ctl.py) from
this source tree, or from where CMake's install put it (share/steptrace/python). Needs Python 3 only."""
import os
import sys

HERE = os.path.dirname(os.path.realpath(__file__))
for candidate in (os.path.join(HERE, "..", "python"), os.path.join(HERE, "..", "share", "steptrace", "python")):
    if os.path.isfile(os.path.join(candidate, "steptrace", "ctl.py")):
        sys.path.insert(0, os.path.abspath(candidate))
        break

from steptrace.ctl import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
