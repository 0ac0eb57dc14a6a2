"""``slaq report``: metrics.h5 round trip, the table, and valid PNGs with the right series."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from slaq_mpi.cli.report import add_cli, format_table, load_runs
from slaq_mpi.config import experiment as config
from slaq_mpi.config.saved import read_run
from slaq_mpi.errors import ConfigError
from slaq_mpi.report.evaluation import common_l_star, makespan
from slaq_mpi.sim import run_policies
from slaq_mpi.storage.metrics import read_metrics, write_metrics

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def small_spec(seed: int = 1) -> Any:
    return config.parse({
        "name": "small", "epoch_seconds": 1.0, "policy": "fair", "ranks": 9, "seed": seed,
        "jobs": [{"name": "lr", "algorithm": "logreg",
                  "dataset": {"generator": "classification", "rows": 10000, "features": 10},
                  "stop": {"max_iterations": 200, "tolerance": 1e-6}}],
        "simulation": {"capacity": 8, "curves": "analytic", "work_scale": 20.0,
                       "workload": {"jobs": 6, "mean_gap": 2.0}},
    }, check_files=False)


@pytest.fixture(scope="module")
def sim_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("sim")
    run_policies(small_spec(), ["fair", "fifo"], out=out)
    return out


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_cli(parser.add_subparsers(dest="cmd"))
    return parser.parse_args(argv)


def test_metrics_roundtrip(tmp_path: Path) -> None:
    run = run_policies(small_spec(), ["fair"])["fair"]
    write_metrics(tmp_path / "m.h5", run)
    back = read_metrics(tmp_path / "m.h5")
    assert back.policy == "fair" and back.mode == "simulate" and back.capacity == 8
    assert back.job_names == run.job_names
    assert np.array_equal(back.alloc, run.alloc)
    np.testing.assert_array_equal(back.pause_ms, run.pause_ms)  # the modelled pauses, NaN without a move
    for name, job in run.jobs.items():
        b = back.jobs[name]
        assert np.array_equal(b.loss, job.loss) and np.array_equal(b.time, job.time)
        assert b.status == job.status and b.l_star == job.l_star and b.end == job.end


def test_table_and_json(sim_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = parse(["report", str(sim_dir), "--no-plots", "--json"])
    assert args.func(args) == 0
    got = capsys.readouterr()
    assert len(got.out.splitlines()) == 1  # with --json, stdout is the JSON alone (pipe it to jq)
    lines = got.err.splitlines()
    assert lines[0].startswith("average normalized loss over the common window")
    out = lines[1:]
    assert out[0].split()[0] == "policy" and "avg norm loss" in out[0]
    assert any(line.startswith("fair ") for line in out) and any(line.startswith("fifo ") for line in out)
    assert any(line.startswith("fifo vs fair:") for line in out)
    data = json.loads(got.out)
    assert set(data["runs"]) == {"fair", "fifo"}
    assert 0 <= data["runs"]["fair"]["avg_normalized_loss"] <= 1
    for header in ("utility", "max rho", "mean rho", "p-mean speedup"):
        assert header in out[0]
    fair = data["runs"]["fair"]
    assert fair["max_rho"] >= fair["mean_rho"] > 0  # read back from metrics.h5 (true scaling)
    assert 0 < fair["min_speedup"] <= fair["mean_speedup"]
    # counts print as whole numbers (6, not 6.0)
    assert type(fair["jobs"]) is int and type(fair["reached_90"]) is int
    assert fair["jobs"] >= fair["reached_90"]


def test_repeated_policies_get_unique_labels(sim_dir: Path, tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    assert list(load_runs([sim_dir / "fair", sim_dir / "fair"])) == ["fair"]  # one run, read once
    other = tmp_path / "again" / "fair"
    other.mkdir(parents=True)
    (other / "metrics.h5").write_bytes((sim_dir / "fair" / "metrics.h5").read_bytes())
    monkeypatch.chdir(tmp_path)
    runs = load_runs([sim_dir / "fair", Path("again")])
    assert len(runs) == 2 and all(k.startswith("fair (simulate, ") for k in runs)  # both by directory
    assert f"fair (simulate, {Path('again') / 'fair'})" in runs


def test_a_glob_over_runs_and_their_plots_reads_the_runs(sim_dir: Path, tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "avg_normalized_loss.png").write_bytes(PNG_MAGIC)  # what a report wrote there
    for name in ("fair", "fifo"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "metrics.h5").write_bytes((sim_dir / name / "metrics.h5").read_bytes())
    assert sorted(load_runs(sorted(tmp_path.iterdir()))) == ["fair", "fifo"]  # slaq report runs/paper/*
    assert capsys.readouterr().err == ""  # our own plots are passed over silently
    (tmp_path / "notes.txt").write_text("mine")
    runs = load_runs(sorted(tmp_path.iterdir()))
    assert sorted(runs) == ["fair", "fifo"]
    err = capsys.readouterr().err
    assert "skipped what is not a run" in err and "notes.txt" in err and ".png" not in err
    with pytest.raises(ConfigError, match="RUN_DIR"):
        load_runs([tmp_path / "avg_normalized_loss.png"])
    # a run killed while writing its first metrics.h5 is named, not left out silently
    (tmp_path / "slaq").mkdir()
    (tmp_path / "slaq" / "metrics.h5.tmp4242").write_bytes(b"\x89HDF")
    (tmp_path / "not-a-run").mkdir()
    assert sorted(load_runs([tmp_path])) == ["fair", "fifo"]
    assert capsys.readouterr().err == ("slaq: note: skipped runs that stopped before they first saved "
                                       f"metrics.h5: {tmp_path / 'slaq'}\n")


def test_runs_of_different_workloads_are_not_compared(tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    run_policies(small_spec(), ["fair"], out=tmp_path / "s1")
    run_policies(small_spec(seed=2), ["fair"], out=tmp_path / "s2")  # seed 2: other arrivals, same job names
    alone = {}
    for name in ("s1", "s2"):
        args = parse(["report", str(tmp_path / name), "--no-plots", "--json"])
        assert args.func(args) == 0
        alone[name] = json.loads(capsys.readouterr().out.splitlines()[-1])["runs"]["fair"]
    args = parse(["report", str(tmp_path / "s1"), str(tmp_path / "s2"), "--json"])
    assert args.func(args) == 0
    got = capsys.readouterr()
    assert "not of one workload" in got.err and " vs " not in got.err and "plots skipped" in got.err
    both = json.loads(got.out)["runs"]
    assert sorted(both.values(), key=lambda r: r["makespan"]) == \
        sorted(alone.values(), key=lambda r: r["makespan"])  # each measured as on its own


def test_a_real_runs_utilities_come_from_its_config(sim_dir: Path, tmp_path: Path) -> None:
    run = read_metrics(sim_dir / "fair")
    name = run.job_names[0]
    run.mode = "run"
    run.config = (f"name: x\njobs:\n  - {{name: {name}, algorithm: logreg, utility: {{value: 1e1, "
                  "deadline: 60, decay: 30}}\n  - {name: other, utility: {value: -1}}\n")
    for job in run.jobs.values():
        job.utility = None  # slaq run writes no utility attribute
    write_metrics(tmp_path / "m.h5", run)
    back = read_run(tmp_path / "m.h5")
    assert back.jobs[name].utility == {"value": 10.0, "deadline": 60.0, "decay": 30.0}
    assert all(j.utility is None for n, j in back.jobs.items() if n != name)


def test_report_out_must_be_a_directory(sim_dir: Path, tmp_path: Path) -> None:
    (tmp_path / "afile").write_text("x")
    args = parse(["report", str(sim_dir), "--out", str(tmp_path / "afile")])
    with pytest.raises(ConfigError, match="--out.*not a directory"):
        args.func(args)
    args = parse(["report", str(sim_dir), "--out", str(tmp_path / "afile" / "plots")])
    with pytest.raises(ConfigError, match="--out.*afile is not a writable directory"):
        args.func(args)
    assert (tmp_path / "afile").read_text() == "x"


def test_identical_figures_compare_as_the_same() -> None:
    from slaq_mpi.cli.report import format_comparison

    rows = {"fair": {"avg_normalized_loss": 0.5}, "fifo": {"avg_normalized_loss": 0.5}}
    assert "avg_normalized_loss the same" in format_comparison(rows)


def test_a_time_comparison_names_differing_counts_of_jobs_that_reached_it() -> None:
    from slaq_mpi.cli.report import format_comparison

    rows = {"fair": {"mean_time_to_90": 10.0, "reached_90": 6.0, "mean_time_to_95": 20.0, "reached_95": 6.0},
            "slaq": {"mean_time_to_90": 5.0, "reached_90": 6.0, "mean_time_to_95": 2.0, "reached_95": 4.0}}
    line = format_comparison(rows)
    assert "mean_time_to_90 50.0% lower," in line  # same jobs: no note
    assert "mean_time_to_95 90.0% lower (4 vs 6 jobs reached 95%)" in line


def test_missing_run_dir_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="RUN_DIR"):
        load_runs([tmp_path / "nope"])


def test_format_table_handles_missing_values() -> None:
    text = format_table({"a": {"avg_normalized_loss": float("nan")}})
    assert text.splitlines()[1].split()[:2] == ["a", "-"]


def test_pngs_are_valid_with_expected_series(sim_dir: Path, tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    import matplotlib.image as mpimg

    from slaq_mpi.report.plots import write_plots

    runs = load_runs([sim_dir])
    written = write_plots(runs, common_l_star(runs.values()), tmp_path)
    by_name = {p.name: n for p, n in written.items()}
    assert by_name == {
        "avg_normalized_loss.png": 2,   # one line per run
        "time_to_reduction.png": 2,     # one line per run
        "core_share.png": 6,            # high / medium / low per run
        "fairness.png": 6,              # rho and speedup per run, plus two reference lines
    }
    from slaq_mpi.cli.report import PLOT_FILES

    assert set(PLOT_FILES) == set(by_name)  # what `report --out` checks before it writes
    for path in written:
        assert path.read_bytes()[:8] == PNG_MAGIC
        img = mpimg.imread(path)
        assert img.ndim == 3 and img.shape[0] > 100 and img.shape[1] > 100
        assert float(img[..., :3].std()) > 0.01  # not a blank canvas


def test_report_out_is_checked_before_anything_is_printed(sim_dir: Path, tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    from slaq_mpi.errors import ConfigError

    (tmp_path / "figs" / "core_share.png").mkdir(parents=True)
    for out, needle in (("", "must name a directory"),
                        (str(tmp_path / "figs"), "holds core_share.png, which is not a file"),
                        ("/proc/slaq-figs", "/proc is not a writable directory")):  # even as root
        args = parse(["report", str(sim_dir / "fair"), "--out", out])
        with pytest.raises(ConfigError, match=needle):
            args.func(args)
        assert capsys.readouterr().out == ""  # no table before the refusal
    assert [p.name for p in (tmp_path / "figs").iterdir()] == ["core_share.png"]


def test_report_command_writes_pngs(sim_dir: Path, tmp_path: Path,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("matplotlib")
    args = parse(["report", str(sim_dir / "fair"), str(sim_dir / "fifo"), "--out", str(tmp_path), "--json"])
    assert args.func(args) == 0
    assert sorted(p.name for p in tmp_path.glob("*.png")) == [
        "avg_normalized_loss.png", "core_share.png", "fairness.png", "time_to_reduction.png"]
    got = capsys.readouterr()
    assert sum(line.startswith("wrote ") for line in got.err.splitlines()) == 4
    assert set(json.loads(got.out)["runs"]) == {"fair", "fifo"}  # stdout: the JSON alone


def test_plots_go_where_the_runs_are(tmp_path: Path) -> None:
    from slaq_mpi.cli.report import plots_dir

    for name in ("paper/slaq", "paper/fair", "other/slaq"):
        (tmp_path / name).mkdir(parents=True)
        (tmp_path / name / "metrics.h5").touch()
    assert plots_dir([tmp_path / "paper" / "slaq"]) == tmp_path / "paper" / "slaq"
    assert plots_dir([tmp_path / "paper" / "slaq" / "metrics.h5"]) == tmp_path / "paper" / "slaq"
    assert plots_dir([tmp_path / "paper" / "slaq", tmp_path / "paper" / "fair"]) == tmp_path / "paper"
    # runs from different places: the first one's directory, never a far ancestor such as /
    first = tmp_path / "paper" / "fair"
    assert plots_dir([first, tmp_path / "other" / "slaq"]) == first


def test_window_option(sim_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = parse(["report", str(sim_dir), "--no-plots", "--json", "--window", "0:4"])
    assert args.func(args) == 0
    got = capsys.readouterr()
    assert got.err.splitlines()[0] == "average normalized loss over the window given: 0-4 s"
    data = json.loads(got.out)["runs"]
    args = parse(["report", str(sim_dir), "--no-plots", "--json"])
    assert args.func(args) == 0
    whole = json.loads(capsys.readouterr().out.splitlines()[-1])["runs"]
    # the window changes the figure; under fair, whose jobs all start at once, the first
    # seconds (every job arrives at normalized loss 1.0) are worse than the whole run
    assert all(data[k]["avg_normalized_loss"] != whole[k]["avg_normalized_loss"] for k in data)
    assert data["fair"]["avg_normalized_loss"] > 1.5 * whole["fair"]["avg_normalized_loss"]
    assert not any(line.startswith("note:") for line in got.err.splitlines())  # 0-4 s: inside both
    # a window past a run's end says so: the average covers the run's active time only
    ends = {k: makespan(read_metrics(sim_dir / k)) for k in ("fair", "fifo")}  # first arrival is 0
    args = parse(["report", str(sim_dir), "--no-plots", "--window", f"2:{max(ends.values()) + 50:g}"])
    assert args.func(args) == 0
    notes = [line for line in capsys.readouterr().out.splitlines() if line.startswith("note:")]
    assert notes == [f"note: run {k} ended at {ends[k]:g} s, inside the window: its average covers "
                     f"2-{ends[k]:g} s only" for k in sorted(ends)], notes
    args = parse(["report", str(sim_dir / "fair"), "--no-plots", "--window", f"{ends['fair'] + 1:g}:1e6"])
    assert args.func(args) == 0
    assert f"note: run fair ended at {ends['fair']:g} s, before the window starts: no job is active " \
           "in it" in capsys.readouterr().out
    for text, why in (("5:1", "END must be greater"), ("-5:10", "START >= 0"), ("nan:5", "finite"),
                      ("", "must be START:END")):  # an empty --window is refused, as --out ''
        with pytest.raises(ConfigError, match=why):
            bad = parse(["report", str(sim_dir), "--no-plots", f"--window={text}"])
            bad.func(bad)


def test_real_and_simulated_runs_are_labelled_apart(sim_dir: Path, tmp_path: Path) -> None:
    from slaq_mpi.cli.report import format_comparison
    from slaq_mpi.report.summary import summarize_runs

    real = read_metrics(sim_dir / "fair")
    real.mode = "run"  # stands in for a real run of the same config
    write_metrics(tmp_path / "real" / "metrics.h5", real)
    runs = load_runs([tmp_path / "real", sim_dir / "fair", sim_dir / "fifo"])
    assert sorted(runs) == ["fair (run)", "fair (simulate)", "fifo (simulate)"]
    rows, _ = summarize_runs(runs)
    assert "vs fair:" not in format_comparison(rows)  # no real-vs-simulated comparison
    assert sorted(load_runs([sim_dir / "fair", sim_dir / "fifo"])) == ["fair", "fifo"]


def test_a_report_of_real_and_simulated_runs_says_their_losses_need_not_match(
        sim_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    real = read_metrics(sim_dir / "fair")
    real.mode = "run"
    write_metrics(tmp_path / "real" / "metrics.h5", real)
    for dirs, said in (([tmp_path / "real", sim_dir / "fair"], True), ([sim_dir / "fair"], False)):
        args = parse(["report", *map(str, dirs), "--no-plots"])
        assert args.func(args) == 0
        assert ("note: real and simulated runs share each job's L*" in capsys.readouterr().out) == said


def test_core_share_titles_are_the_time_weighted_shares_of_the_table(
        sim_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Epochs differ in length (cut short at arrivals and finishes): the plot's percentages
    are the same time-weighted means as the report's core_share_* figures."""
    pytest.importorskip("matplotlib")
    from slaq_mpi.report import plots
    from slaq_mpi.report.summary import summarize_runs

    runs = load_runs([sim_dir])
    l_star = common_l_star(runs.values())
    titles: dict[str, list[str]] = {}
    real_save = plots._save

    def keep_titles(fig, path: Path) -> Path:  # type: ignore[no-untyped-def]
        titles[path.name] = [ax.get_title() for ax in fig.axes]
        return real_save(fig, path)

    monkeypatch.setattr(plots, "_save", keep_titles)
    plots.write_plots(runs, l_star, tmp_path)
    rows, _ = summarize_runs(runs)
    for (label, run), title in zip(runs.items(), titles["core_share.png"], strict=True):
        row = rows[label]
        want = [f"{100 * row[f'core_share_{g}']:.0f}%" for g in ("high", "medium", "low")]
        assert title == f"{label}: high {want[0]}, medium {want[1]}, low {want[2]} of cores", title
        times = run.epoch_time
        assert len(set(np.round(np.diff(times), 6))) > 1  # epochs of unequal length: it matters


def test_window_times_stay_readable_at_any_size() -> None:
    from slaq_mpi.cli.report import _window, window_line

    assert window_line((0.0, 3484.98)).endswith(": 0-3484.98 s")
    assert window_line((1e9, 1.5e9), chosen=True).endswith(": 1,000,000,000-1,500,000,000 s")
    assert _window("1,000,000,000:1,500,000,000") == (1e9, 1.5e9)  # a printed window reads back
