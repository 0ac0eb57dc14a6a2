"""``python -m slaq_mpi`` is the ``slaq`` command, as every rank of ``slaq run`` starts it.

Before anything else (and before :mod:`jobs` can be imported) it drops the working directory
that ``-m`` put first on ``sys.path``, and records stop signals that reach a starting rank.
"""

import sys

from slaq_mpi import _path
from slaq_mpi.runtime import signals

_path.drop_shadowing_entry()
signals.install()

from slaq_mpi.cli import main  # noqa: E402 - after the path is fixed

sys.exit(main())
