"""``python -m gpuctl`` (same as the ``gpuctl`` console script)."""

import sys

from gpuctl.main import main

sys.exit(main())
