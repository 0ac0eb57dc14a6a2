"""``python -m slaq_mpi`` is the ``slaq`` command. ``slaq run`` starts every rank as
``python .../slaq_mpi/__main__.py``, the file of the package the command itself imported, so
the ranks run the same code as the checks before the launch (a checkout in the working
directory cannot shadow an installed package, nor the other way round).

Before anything else (and before :mod:`jobs` can be imported) it drops the working directory
that ``-m`` put first on ``sys.path``, and records stop signals that reach a starting rank.
"""

import os
import sys

if not __package__:  # run as a file, as `slaq run` starts its ranks: import this very copy
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

from slaq_mpi import _path  # noqa: E402 - after the path is fixed
from slaq_mpi.runtime import signals

_path.drop_shadowing_entry()
signals.install()

from slaq_mpi.cli import main  # noqa: E402 - after the path is fixed

sys.exit(main())
