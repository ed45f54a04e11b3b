"""``python -m microrag_engine.cli``: the same entry point as the ``microrag`` script."""

import sys

from .main import main

sys.exit(main())
