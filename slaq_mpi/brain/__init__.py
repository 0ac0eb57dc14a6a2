"""The scheduling brain: a library of predictions and allocations that every policy uses.

* :mod:`~slaq_mpi.brain.predict`: loss-curve fits and the normalized reductions they predict
  (:mod:`~slaq_mpi.brain.fitting` the batched fit, :mod:`~slaq_mpi.brain.windows` the loss
  windows it works on, :mod:`~slaq_mpi.brain.memo` the fits kept across decisions);
* :mod:`~slaq_mpi.brain.throughput`: seconds per iteration against cores
  (:mod:`~slaq_mpi.brain.speedmemo` the fits kept across decisions);
* :mod:`~slaq_mpi.brain.forecast`: one decision's forecast of every active job;
* :mod:`~slaq_mpi.brain.outlook`: remaining work, equal shares and useful cores built on it;
* :mod:`~slaq_mpi.brain.allocate`: cores by marginal gain (SLAQ's greedy) and water-filling
  (:mod:`~slaq_mpi.brain.gainrows` each job's gains kept across decisions).

Pure numpy/scipy: imports no MPI, no config loader and nothing of the policies (it reads jobs
through the protocols of :mod:`~slaq_mpi.brain.forecast`).
"""
