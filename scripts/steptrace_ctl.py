#!/usr/bin/env python3
"""steptrace-ctl from this source tree, without installing the Python package: runs steptrace.ctl
(python/steptrace/ctl.py). Needs Python 3 only. (pip installs `steptrace-ctl`; CMake's install makes its own.)"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.realpath(__file__)), "..", "python"))
from steptrace.ctl import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
