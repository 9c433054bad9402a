"""`python -m mlm_core COMMAND`: the library's command line (see mlm_core/cli.py).

A package's `__main__` rather than a `train.py` script, so `mlm_core.train` stays the function.
"""

import sys

from mlm_core.cli import main

if __name__ == "__main__":
    sys.exit(main())
