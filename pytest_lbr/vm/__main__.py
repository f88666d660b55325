"""`python -m pytest_lbr.vm`: the same as `pytest-lbr vm` (the guest side runs so)."""

import sys

from pytest_lbr.vm import main

sys.exit(main())
