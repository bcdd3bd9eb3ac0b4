"""The checks' view of the source tree: its root, and the package's pure-Python tools importable from
python/ (steptrace.lines, steptrace.files, steptrace.merge, steptrace.report) without installing it."""
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPTS = os.path.join(ROOT, "scripts")
if os.path.join(ROOT, "python") not in sys.path:
    sys.path.insert(0, os.path.join(ROOT, "python"))
