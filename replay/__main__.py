"""``python -m replay TRACE ...`` (no Django needed); see ``cli.py``."""

import sys

from .cli import main

sys.exit(main())
