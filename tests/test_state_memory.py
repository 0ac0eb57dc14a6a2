"""A job whose model cannot fit in this machine's memory is refused before any rank starts."""

from __future__ import annotations

import os
import tracemalloc
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import scipy.sparse as sp
import yaml

from jobs import ALGORITHMS, SerialComm, Shard, Solver, load_solver
from slaq_mpi.config import experiment as config
from slaq_mpi.config import memory as mem
from slaq_mpi.errors import ConfigError
from tests.conftest import run_slaq

GIB = 2**30


def _raw(tmp_path: Path, algorithm: str, dataset: dict[str, Any], **hyper: Any) -> dict[str, Any]:
    return {"name": "t", "ranks": 2, "output_dir": str(tmp_path / "run"),
            "jobs": [{"name": "a", "algorithm": algorithm, "hyperparameters": hyper,
                      "dataset": dataset}]}


BLOBS = {"generator": "blobs", "rows": 1000, "features": 50}  # labels 0..7: 8 classes


def _machine(monkeypatch: pytest.MonkeyPatch, size: int) -> None:
    """This machine has ``size`` bytes of memory and no cgroup limit, whatever it really has."""
    monkeypatch.setattr(mem, "cgroup_limit", lambda: None)
    monkeypatch.setattr(mem, "physical_memory", lambda: size)


@pytest.fixture
def memory(monkeypatch: pytest.MonkeyPatch) -> None:
    """This machine has 23.5 GiB of memory, whatever it really has."""
    _machine(monkeypatch, int(23.5 * GIB))


def _parse(raw: dict[str, Any]) -> config.ExperimentSpec:
    """As slaq run checks a config: parsed, then refused if a model does not fit here."""
    spec = config.parse(raw)
    config.check_memory(spec)
    return spec


def test_physical_memory_is_known_here() -> None:
    assert (mem.physical_memory() or 0) > 2**27  # Linux tells; at least 128 MiB


def test_run_refuses_a_model_too_big_for_this_machine_and_validate_notes_it(tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"  # 10^12 hidden units: hundreds of TiB of weights
    cfg.write_text(yaml.safe_dump(_raw(tmp_path, "mlp", BLOBS, hidden=10**12)))
    proc = run_slaq(["run", str(cfg)], cwd=tmp_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("slaq: error: jobs[0].hyperparameters.hidden: "
                                                   "1000000000000 is not allowed; job 'a': mlp with "
                                                   "hidden 1000000000000 on 50 features needs about ")
    assert "on every rank" in lines[0] and "of memory" in lines[0], lines[0]
    assert not (tmp_path / "run").exists()
    # the machine that validates (or submits) need not be the one that trains: a note
    proc = run_slaq(["validate", str(cfg)], cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"{cfg}: note: slaq run would refuse it here: {lines[0][len('slaq: error: '):]}" in proc.stdout


def test_the_line_names_the_size_the_memory_and_the_largest_value_that_fits(
        tmp_path: Path, memory: None) -> None:
    with pytest.raises(ConfigError) as err:
        _parse(_raw(tmp_path, "mlp", BLOBS, hidden=1_000_000_000))
    cls = load_solver("mlp")
    fits = int(str(err.value).rsplit("hidden must be at most ", 1)[1].split()[0])
    need = {h: cls.state_bytes({**cls.defaults, "hidden": h, "classes": 8}, 1000, 50, 200)
            for h in (fits, fits + 1, 1_000_000_000)}
    assert need[fits] <= 23.5 * GIB < need[fits + 1]
    assert str(err.value) == (
        "jobs[0].hyperparameters.hidden: 1000000000 is not allowed; job 'a': mlp with hidden "
        f"1000000000 on 50 features needs about {need[1_000_000_000] / 2**40:.3g} TiB on every "
        "rank for its model and a step's buffers; this machine has 23.5 GiB of memory; hidden "
        f"must be at most {fits} to fit at all")


def test_gbt_counts_the_rows_it_densifies(tmp_path: Path, memory: None) -> None:
    """gbt densifies its rows, a sparse file's too: 20,000 rows of 10**7 features cannot fit,
    however small the trees."""
    wide = {"generator": "regression", "rows": 20000, "features": 10**7, "density": 1e-4}
    with pytest.raises(ConfigError, match=r"jobs\[0\]\.dataset\.rows: 20000 .* gbt on 20000 rows x "
                                          r"10000000 features needs about 3\.09 TiB on every rank for "
                                          r"its rows of data, its model and a step's buffers; .*; "
                                          r"use fewer rows or features$"):
        _parse(_raw(tmp_path, "gbt", wide, max_depth=1, bins=2))
    _parse(_raw(tmp_path, "gbt", {**wide, "features": 1000}, max_depth=1, bins=2))  # 0.3 GiB


def test_a_data_file_gives_its_features_and_labels(tmp_path: Path, memory: None) -> None:
    import h5py

    with h5py.File(tmp_path / "d.h5", "w") as f:
        f["X"] = np.zeros((30, 4))
        f["y"] = np.arange(30) % 3
    raw = _raw(tmp_path, "mlp", {"path": str(tmp_path / "d.h5")}, hidden=2 * 10**8)
    with pytest.raises(ConfigError, match=r"^jobs\[0\]\.hyperparameters\.hidden: .* on 4 features "):
        _parse(raw)
    config.parse(raw, check_files=False)  # slaq simulate builds no model: not checked
    raw["jobs"][0]["hyperparameters"] = {"hidden": 10**8}  # 6 x 8 x 8e8 bytes: 35.8 GiB
    with pytest.raises(ConfigError, match="about 35.8 GiB"):
        _parse(raw)


def test_too_many_features_names_the_dataset(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _machine(monkeypatch, 10_000)
    wide = {"generator": "classification", "rows": 10, "features": 1000}
    with pytest.raises(ConfigError, match=r"^jobs\[0\]\.dataset\.features: 1000 is not allowed; job "
                       r"'a': logreg on 1000 features needs about 39.1 KiB .* fewer features$"):
        _parse(_raw(tmp_path, "logreg", wide))
    # a hyperparameter set below its default saves nothing: the dataset is still to blame
    with pytest.raises(ConfigError, match=r"^jobs\[0\]\.dataset\.features: .* kmeans on 1000"):
        _parse(_raw(tmp_path, "kmeans", {**BLOBS, "features": 1000}, k=4))
    _parse(_raw(tmp_path, "logreg", {**wide, "features": 100}))


def test_a_model_too_big_at_any_size_of_its_key_names_the_dataset(tmp_path: Path, memory: None) -> None:
    huge = {"generator": "classification", "rows": 10, "features": 10**10}
    with pytest.raises(ConfigError, match=r"^jobs\[0\]\.dataset\.features: 10000000000 is not allowed; "
                       r"job 'a': mlp on 10000000000 features .* fewer features$"):
        _parse(_raw(tmp_path, "mlp", huge, hidden=50))  # hidden 1 would not fit either


def test_a_key_whose_default_is_too_big_too_still_gets_its_largest_value(tmp_path: Path,
                                                                         memory: None) -> None:
    wide = {"generator": "classification", "rows": 10, "features": 5 * 10**7}
    with pytest.raises(ConfigError) as err:  # the default hidden does not fit 50M features either
        _parse(_raw(tmp_path, "mlp", wide, hidden=100))
    assert str(err.value).startswith("jobs[0].hyperparameters.hidden: 100 is not allowed; ")
    fits = int(str(err.value).rsplit("hidden must be at most ", 1)[1].split()[0])
    cls = load_solver("mlp")
    need = {h: cls.state_bytes({**cls.defaults, "hidden": h, "classes": 2}, 10, 5 * 10**7, 200)
            for h in (fits, fits + 1, cls.defaults["hidden"])}
    assert need[fits] <= 23.5 * GIB < min(need[fits + 1], need[cls.defaults["hidden"]])


def test_submit_notes_a_model_too_big_for_the_login_node(tmp_path: Path) -> None:
    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump(_raw(tmp_path, "mlp", BLOBS, hidden=10**12)))
    proc = run_slaq(["submit", str(cfg), "--dry-run"], cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.startswith("#!"), proc.stdout  # stdout is the script alone
    assert ("slaq: note: too big for this machine's memory: jobs[0].hyperparameters.hidden: "
            "1000000000000 is not allowed; ") in proc.stderr, proc.stderr


def test_unknown_memory_or_estimate_skips_the_check(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "mine.py").write_text(
        "from jobs import Solver\n\nclass Mine(Solver):\n    defaults = {'size': 1}\n"
        "    needs_labels = False\n\n    def step(self): return 0.0\n\n"
        "    def get_state(self): return {}\n\n    def set_state(self, state): pass\n")
    _machine(monkeypatch, 1)
    _parse(_raw(tmp_path, f"{tmp_path}/mine.py:Mine", BLOBS))  # inherits 0: unknown
    monkeypatch.undo()
    monkeypatch.setattr(mem, "cgroup_limit", lambda: None)
    monkeypatch.setattr(os, "sysconf", lambda name: -1)  # the platform does not know
    assert mem.physical_memory() is None
    monkeypatch.setattr(os, "sysconf", _no_sysconf)
    assert mem.physical_memory() is None and mem.memory_here() is None
    _parse(_raw(tmp_path, "mlp", BLOBS, hidden=10**12))


def _no_sysconf(name: str) -> int:
    raise ValueError(f"unrecognized configuration name {name!r}")


def test_a_user_estimate_is_used_and_its_errors_are_one_line(tmp_path: Path, memory: None) -> None:
    (tmp_path / "big.py").write_text(
        "from jobs import Solver\n\nclass Big(Solver):\n    defaults = {'size': 1}\n"
        "    needs_labels = False\n\n    @classmethod\n"
        "    def state_bytes(cls, params, rows, features, iterations):\n"
        "        if params['size'] < 0: raise ValueError('negative size')\n"
        "        return params['size'] * 2**30\n\n    def step(self): return 0.0\n\n"
        "    def get_state(self): return {}\n\n    def set_state(self, state): pass\n")
    ref = f"{tmp_path}/big.py:Big"
    _parse(_raw(tmp_path, ref, BLOBS, size=23))
    with pytest.raises(ConfigError, match=r"^jobs\[0\]\.hyperparameters\.size: 24 is not allowed; "
                       r".* needs about 24 GiB .* 23.5 GiB of memory; size must be at most 23 to"):
        _parse(_raw(tmp_path, ref, BLOBS, size=24))
    with pytest.raises(ConfigError, match=r"^jobs\[0\]\.algorithm: .* its state_bytes raised "
                       r"ValueError: negative size$"):
        _parse(_raw(tmp_path, ref, BLOBS, size=-1))


def test_a_model_too_big_on_any_data_names_the_algorithm_not_the_dataset(tmp_path: Path,
                                                                         memory: None) -> None:
    """A user solver whose estimate is too big whatever the data (here: its default size, not
    set in the YAML) is not blamed on the dataset's features."""
    (tmp_path / "huge.py").write_text(
        "from jobs import Solver\n\nclass Huge(Solver):\n    defaults = {'size': 100}\n"
        "    needs_labels = False\n\n    @classmethod\n"
        "    def state_bytes(cls, params, rows, features, iterations):\n"
        "        return params['size'] * 2**30 + 8 * features\n\n    def step(self): return 0.0\n\n"
        "    def get_state(self): return {}\n\n    def set_state(self, state): pass\n")
    ref = f"{tmp_path}/huge.py:Huge"
    with pytest.raises(ConfigError, match=r"^jobs\[0\]\.algorithm: '.*huge\.py:Huge' is not allowed; job "
                       r"'a': .* needs about 100 GiB .*; even 1 row x 1 feature would need about 100 GiB, "
                       r"by the solver's state_bytes estimate: set smaller hyperparameters, or check"):
        _parse(_raw(tmp_path, ref, BLOBS))
    _parse(_raw(tmp_path, ref, BLOBS, size=20))


def test_a_model_grown_too_big_by_its_iterations_names_the_stop_rule(tmp_path: Path, memory: None) -> None:
    """Boosted trees keep one tree per iteration: a huge max_iterations is what to change, not
    the algorithm or the data."""
    raw = _raw(tmp_path, "gbt", {"generator": "regression", "rows": 1000, "features": 10})
    raw["jobs"][0]["stop"] = {"max_iterations": 10**9}
    with pytest.raises(ConfigError) as err:
        _parse(raw)
    msg = str(err.value)
    assert msg.startswith("jobs[0].stop.max_iterations: 1000000000 is not allowed; job 'a': gbt "), msg
    most = int(msg.rsplit("it must be at most ", 1)[1].split()[0])
    cls = load_solver("gbt")
    need = {k: cls.state_bytes(cls.defaults, 1000, 10, k) for k in (most, most + 1)}
    assert need[most] <= 23.5 * GIB < need[most + 1]
    raw["jobs"][0]["stop"] = {"max_iterations": most}
    _parse(raw)


def test_the_packaged_configs_validate_with_small_models() -> None:
    root = Path(__file__).resolve().parent.parent
    for path in sorted((root / "configs").glob("*.yaml")):
        spec = config.load(path)
        for job in spec.jobs:
            cls = load_solver(job.algorithm)
            p = job.dataset.params
            params = {**cls.defaults, **job.hyperparameters}
            need = cls.state_bytes(params, p["rows"], p["features"], job.stop.max_iterations)
            assert 0 < need < GIB // 4, (path.name, job.name, need)  # fits a small CI machine


# --- the estimates against a real instance ---------------------------------------------------

# small rows and a wide model: the per-row buffers (which shrink with more ranks) are negligible
SIZES: dict[str, tuple[dict[str, Any], int]] = {
    "logreg": ({}, 2000), "svm": ({}, 2000), "linreg": ({}, 2000),
    "logreg_lbfgs": ({"history": 4}, 2000), "mlp": ({"hidden": 100, "classes": 3}, 200),
    "kmeans": ({"k": 10}, 2000), "gmm": ({"k": 10}, 2000), "lda": ({"topics": 20}, 2000),
    "gbt": ({"max_depth": 5, "bins": 64}, 100), "gbt_classifier": ({"max_depth": 5, "bins": 64}, 100),
}
ROWS, WARM = 12, 6


def _data(cls: type[Solver], features: int) -> tuple[Any, np.ndarray | None]:
    rng = np.random.default_rng(0)
    kind = getattr(cls, "dataset_kind", "")
    if kind == "documents":
        X = sp.random(ROWS, features, density=5.0 / features, random_state=1, format="csr")
        X.data = np.ceil(X.data * 3)
        return X, None
    X = rng.standard_normal((ROWS, features))
    if kind == "blobs":
        return X, (np.arange(ROWS) % 3).astype(float)
    if kind == "regression":
        return X, X[:, 0] + rng.standard_normal(ROWS)
    return X, (np.arange(ROWS) % 2).astype(float)


def test_every_built_in_algorithm_has_a_size() -> None:
    assert set(SIZES) == set(ALGORITHMS)


@pytest.mark.parametrize("algorithm", sorted(ALGORITHMS))
def test_the_estimate_is_within_a_factor_of_2_of_the_real_bytes(algorithm: str) -> None:
    cls = load_solver(algorithm)
    params, features = SIZES[algorithm]
    X, y = _data(cls, features)
    solver = cls(SerialComm(), Shard(X=X, y=y, row_start=0, n_rows=ROWS), params, 1)
    for _ in range(WARM):  # fills L-BFGS's history, grows trees
        solver.step()
    state = sum(a.nbytes for a in solver.get_state().values())
    tracemalloc.start()  # numpy reports its buffers to tracemalloc
    try:
        before = tracemalloc.get_traced_memory()[0]
        solver.step()
        step_peak = tracemalloc.get_traced_memory()[1] - before
    finally:
        tracemalloc.stop()
    real = state + step_peak
    estimate = cls.state_bytes({**cls.defaults, **params}, ROWS, features, WARM + 1)
    assert estimate >= state, (estimate, state)
    assert real / 2 <= estimate <= 2 * real, (estimate, state, step_peak)


def _cgroup_tree(tmp_path: Path, proc: str, files: dict[str, str]) -> tuple[Path, Path]:
    """A fake /proc/self/cgroup with text ``proc`` and a /sys/fs/cgroup holding ``files``."""
    root = tmp_path / "cgroup"
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text + "\n")
    (tmp_path / "proc").write_text(proc)
    return tmp_path / "proc", root


def test_a_cgroup_limit_is_read_at_the_lowest_level_that_sets_one(tmp_path: Path) -> None:
    # cgroup v2, as Slurm's task/cgroup sets a job's --mem (the step's level says max)
    v2 = _cgroup_tree(tmp_path / "v2", "0::/system.slice/slurmstepd.scope/job_7/step_0\n", {
        "system.slice/slurmstepd.scope/job_7/memory.max": str(4 * GIB),
        "system.slice/slurmstepd.scope/job_7/step_0/memory.max": "max",
        "system.slice/memory.max": "max"})
    assert mem.cgroup_limit(*v2) == 4 * GIB
    # cgroup v1: a memory line among others; no limit is a huge number, never below the machine
    v1 = _cgroup_tree(tmp_path / "v1", "4:cpu,cpuacct:/job\n3:memory:/slurm/uid_0/job_9\n", {
        "memory/slurm/uid_0/job_9/memory.limit_in_bytes": str(2 * GIB),
        "memory/memory.limit_in_bytes": "9223372036854771712"})
    assert mem.cgroup_limit(*v1) == 2 * GIB
    # a container sees only the mount's top, not the path /proc names
    inside = _cgroup_tree(tmp_path / "c", "4:memory:/docker/abc\n",
                          {"memory/memory.limit_in_bytes": str(GIB)})
    assert mem.cgroup_limit(*inside) == GIB
    assert mem.cgroup_limit(tmp_path / "nowhere", tmp_path) is None  # not Linux
    unlimited = _cgroup_tree(tmp_path / "u", "0::/user.slice\n", {"user.slice/memory.max": "max"})
    assert mem.cgroup_limit(*unlimited) is None
    unlimited = _cgroup_tree(tmp_path / "u1", "3:memory:/\n",
                             {"memory/memory.limit_in_bytes": "9223372036854771712"})
    assert mem.cgroup_limit(*unlimited) is None


def test_a_job_under_a_cgroup_limit_is_checked_against_it(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(mem, "physical_memory", lambda: 256 * GIB)
    monkeypatch.setattr(mem, "cgroup_limit", lambda: 4 * GIB)  # sbatch --mem=4G
    with pytest.raises(ConfigError, match=r"needs about 26.4 GiB .*; this process may use 4 GiB of "
                       r"memory \(its cgroup's limit: a Slurm job's --mem or a container's\); "
                       r"hidden must be at most \d+ to fit"):
        _parse(_raw(tmp_path, "mlp", BLOBS, hidden=10**7))
    monkeypatch.setattr(mem, "cgroup_limit", lambda: 512 * GIB)  # above the machine: the machine
    assert mem.memory_here() == (256 * GIB, "this machine has 256 GiB of memory")
    _parse(_raw(tmp_path, "mlp", BLOBS, hidden=10**7))


def test_an_integer_given_for_a_float_hyperparameter_is_kept_as_a_float(tmp_path: Path) -> None:
    raw = _raw(tmp_path, "logreg", {"generator": "classification", "rows": 100, "features": 5},
               learning_rate=2, fit_intercept=False)
    hyper = config.parse(raw, check_files=False).jobs[0].hyperparameters
    assert hyper["learning_rate"] == 2.0 and type(hyper["learning_rate"]) is float
    assert hyper["fit_intercept"] is False
    raw["jobs"][0]["hyperparameters"] = {"fit_intercept": 1}  # a bool is not taken from an int
    with pytest.raises(ConfigError, match=r"hyperparameters\.fit_intercept: 1 .* type bool"):
        config.parse(raw, check_files=False)
