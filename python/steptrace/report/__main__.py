"""python -m steptrace.report LOG... [-o FILE]: the same as `steptrace-report`."""
import sys

from . import main

sys.exit(main())
