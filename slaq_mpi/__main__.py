"""``python -m slaq_mpi`` is the ``slaq`` command."""

import sys

from slaq_mpi.cli import main

sys.exit(main())
