"""The ``slaq`` command line as a new user meets it: ``--version``, ``slaq`` alone, install hints
that fit the installation, every benchmark's ``--help``, and ``slaq report`` on a stopped run."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

import slaq_mpi
from slaq_mpi._install import _pip_install, pip_install
from slaq_mpi.cli import main

ROOT = Path(__file__).resolve().parent.parent


def test_version_names_the_version_and_where_the_code_is(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stop:
        main(["--version"])
    assert stop.value.code == 0
    assert capsys.readouterr().out == (f"slaq-mpi {slaq_mpi.__version__} "
                                       f"({Path(slaq_mpi.__file__).resolve().parent})\n")


def test_slaq_alone_prints_the_help_and_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 0
    captured = capsys.readouterr()
    assert captured.out.startswith("usage: slaq ") and "validate" in captured.out
    assert captured.err == ""


@pytest.mark.slow  # starts a Python per script
@pytest.mark.parametrize("script", sorted(p.name for p in (ROOT / "benchmarks").glob("*.py")))
def test_every_benchmark_answers_help(script: str) -> None:
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / script), "--help"],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(f"usage: {script} "), proc.stdout


def _layout(tmp_path: Path) -> tuple[Path, Path]:
    """A checkout holding slaq_mpi/, and a site-packages where pip installed it from there."""
    checkout, site = tmp_path / "src" / "slaq mpi", tmp_path / "venv" / "site-packages"
    (checkout / "slaq_mpi").mkdir(parents=True)
    (checkout / "pyproject.toml").write_text("[project]\nname = 'slaq-mpi'\n")
    (site / "slaq_mpi").mkdir(parents=True)
    (site / "slaq_mpi-0.1.0.dist-info").mkdir()
    return checkout, site


def test_install_hints_fit_how_slaq_mpi_was_installed(tmp_path: Path) -> None:
    checkout, site = _layout(tmp_path)
    # imported from the checkout: an editable install (which a plain install would replace)
    assert _pip_install("plot", checkout / "slaq_mpi", checkout) == "pip install -e '.[plot]'"
    assert _pip_install("plot", checkout / "slaq_mpi", tmp_path) == f"pip install -e '{checkout}[plot]'"
    # installed from the index (no direct_url.json), or from a wheel file
    assert _pip_install("plot", site / "slaq_mpi", checkout) == "pip install 'slaq-mpi[plot]'"
    recorded = site / "slaq_mpi-0.1.0.dist-info" / "direct_url.json"
    recorded.write_text(json.dumps({"url": (tmp_path / "x.whl").as_uri(), "archive_info": {}}))
    assert _pip_install("plot", site / "slaq_mpi", checkout) == "pip install 'slaq-mpi[plot]'"
    # installed (not editable) from the checkout: pip install '.[plot]' there
    recorded.write_text(json.dumps({"url": checkout.as_uri(), "dir_info": {}}))
    assert _pip_install("plot", site / "slaq_mpi", checkout) == "pip install '.[plot]'"
    assert _pip_install("mpich", site / "slaq_mpi", tmp_path) == f"pip install '{checkout}[mpich]'"


def test_report_names_the_plot_extra_as_this_installation_needs_it(
        sim_run: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setitem(sys.modules, "slaq_mpi.report.plots", None)  # as without matplotlib
    assert main(["report", str(sim_run)]) == 0
    out = capsys.readouterr().out
    assert f"plots skipped: matplotlib is not installed ({pip_install('plot')})" in out
    if (Path(slaq_mpi.__file__).resolve().parent.parent / "pyproject.toml").is_file():
        assert "slaq-mpi[plot]" not in out  # these tests import the package from a checkout


@pytest.fixture
def sim_run(tmp_path: Path) -> Path:
    """A simulated run cut short after 3 epochs, with jobs still running and waiting."""
    from slaq_mpi.config import experiment as config
    from slaq_mpi.sim import run_policies

    spec = config.parse({
        "name": "small", "epoch_seconds": 1.0, "policy": "fair", "ranks": 3, "seed": 1,
        "jobs": [{"name": "lr", "algorithm": "logreg",
                  "dataset": {"generator": "classification", "rows": 1000, "features": 5},
                  "stop": {"max_iterations": 500, "tolerance": 1e-9}}],
        "simulation": {"capacity": 2, "curves": "analytic", "work_scale": 20.0,
                       "workload": {"jobs": 4, "mean_gap": 0.1}},
    }, check_files=False)
    run_policies(spec, ["fair"], out=tmp_path / "sim", max_epochs=3)
    return tmp_path / "sim" / "fair"


def test_report_on_a_stopped_run_says_jobs_were_left_unfinished(
        sim_run: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from slaq_mpi.report.evaluation import observed
    from slaq_mpi.storage.metrics import read_metrics, write_metrics

    run = read_metrics(sim_run / "metrics.h5")
    seen = observed(run).jobs  # the jobs that had arrived when it stopped
    left = sum(job.status in ("running", "waiting") for job in seen.values())
    assert left > 0
    assert main(["report", str(sim_run), "--no-plots"]) == 0
    out = capsys.readouterr().out
    assert (f"note: run fair stopped with {left} of its {len(seen)} jobs left unfinished; "
            "its metrics count them until it stopped") in out, out
    live = tmp_path / "live"
    live.mkdir()
    write_metrics(live / "metrics.h5", replace(run, mode="run"))  # a real run, stopped
    assert main(["report", str(live), "--no-plots"]) == 0
    assert "left unfinished (slaq run --resume RUN_DIR finishes them)" in capsys.readouterr().out


def test_every_command_builds_alone_to_the_same_parser() -> None:
    # a command line naming a command builds only its module's parser (start-up time): every
    # command must be mapped to the module that registers it
    import argparse

    from slaq_mpi import cli

    def commands(parser: argparse.ArgumentParser) -> dict[str, str]:
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        return {name: p.format_help() for name, p in sub.choices.items()}

    every = commands(cli.build_parser())
    assert set(every) == set(cli._COMMAND_MODULE)
    for name, text in every.items():
        assert commands(cli.build_parser(name)) == {n: t for n, t in every.items()
                                                    if cli._COMMAND_MODULE[n] == cli._COMMAND_MODULE[name]}
        assert text
