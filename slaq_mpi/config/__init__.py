"""The experiment YAML: spec dataclasses, validation, and the memory and data checks made
before anything runs. Imports no MPI, and nothing of the simulator or the Slurm commands.

* ``experiment``: :class:`ExperimentSpec`, ``load``/``parse`` and the checks before a run;
* ``job``, ``dataset``: one ``jobs:`` entry and its ``dataset:``;
* ``slurm``, ``simulation``: the ``slurm:`` and ``simulation:`` sections, parsed once with the spec;
* ``schema``: the one keyed-mapping validator every section uses; ``values``: single-value checks;
* ``yaml_loader``: the YAML loader (no duplicate keys); ``model_size``, ``memory``: whether a
  model fits this machine's memory; ``saved``: the experiment a real run kept.
"""
