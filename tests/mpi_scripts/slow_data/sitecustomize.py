"""Put on PYTHONPATH by a test: every dataset a process of the run generates takes at least
``SLAQ_TEST_DATA_SECONDS`` seconds more (slaq_mpi.data.generators.generate sleeps first), so
the test knows a least time spent preparing data."""

import os
import time

_SECONDS = float(os.environ.get("SLAQ_TEST_DATA_SECONDS", "0"))

if _SECONDS > 0:
    from slaq_mpi.data import generators

    _generate = generators.generate

    def _slow_generate(*args, **kwargs):  # type: ignore[no-untyped-def]
        time.sleep(_SECONDS)
        return _generate(*args, **kwargs)

    generators.generate = _slow_generate
