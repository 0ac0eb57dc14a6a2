"""Unit tier for slaq_mpi.slurm: settings validation, the sbatch script (golden files), the one
subprocess boundary ``run_cmd``, ``slaq submit``, and the script's stop/requeue logic run by bash
against fake ``mpiexec`` and ``scontrol`` commands. No Slurm needed."""

from __future__ import annotations

import os
import shlex
import signal
import stat
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

import slaq_mpi
from slaq_mpi import cli
from slaq_mpi.errors import ConfigError
from slaq_mpi.slurm import submit as slurm
from slaq_mpi.slurm.render import render_sbatch
from slaq_mpi.slurm.settings import SlurmSettings, parse_time, settings_for, settings_from_mapping
from slaq_mpi.slurm.submit import SlurmError
from slaq_mpi.storage.metrics import JobRecord, RunRecord

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = Path(__file__).resolve().parent / "golden"
HERE_PKG = str(Path(slaq_mpi.__file__).resolve().parent)  # the slaq_mpi these tests import

FULL = {
    "job_name": "paper-repro",
    "nodes": 2,
    "ntasks": 64,
    "time": "1-12:00:00",
    "partition": "compute,short",
    "account": "ml-lab",
    "qos": "normal",
    "launcher": "srun",
    "mpi": "pmix",
    "launcher_args": ["--cpu-bind=cores"],
    "signal_lead": 600,
    "requeue": True,
    "max_restarts": 3,
    "output": "logs/%x-%j.out",
    "error": "logs/%x-%j.err",
    "chdir": "/scratch/me/slaq",
    "python": "/scratch/me/venv/bin/python",
    "setup": ["module load openmpi/4.1", "source /scratch/me/venv/bin/activate"],
    "extra": ["--mem-per-cpu=2G", "#SBATCH --constraint=ib"],
}

PACKAGE = "/scratch/me/venv/lib/python3.11/site-packages/slaq_mpi"

MPIEXEC = {"launcher": "mpiexec", "mpiexec": "/opt/mpich/bin/mpiexec", "time": "90", "signal_lead": 300,
           "requeue": False, "launcher_args": ["-bind-to", "core"]}


def _golden(name: str, text: str) -> None:
    path = GOLDEN / name
    if os.environ.get("SLAQ_UPDATE_GOLDEN") == "1":
        path.write_text(text)
    assert text == path.read_text(), f"{name} differs; SLAQ_UPDATE_GOLDEN=1 rewrites it after review"


# --- rendering -----------------------------------------------------------------------------

def test_default_settings_render_the_shipped_script() -> None:
    text = render_sbatch(SlurmSettings())
    assert text == (ROOT / "slurm" / "slaq.sbatch").read_text()
    assert text == render_sbatch(settings_from_mapping({}))


def test_shipped_script_has_the_documented_directives() -> None:
    text = (ROOT / "slurm" / "slaq.sbatch").read_text()
    directives = [line for line in text.splitlines() if line.startswith("#SBATCH")]
    for want in ("--signal=B:USR1@120", "--requeue", "--open-mode=append", "--ntasks=8", "--nodes=1"):
        assert f"#SBATCH {want}" in directives
    assert 'LAUNCH=(srun --mpi="$MPI_PLUGIN" --kill-on-bad-exit=1)' in text  # chosen in the job
    assert os.access(ROOT / "slurm" / "slaq.sbatch", os.X_OK)
    assert subprocess.run(["bash", "-n", str(ROOT / "slurm" / "slaq.sbatch")]).returncode == 0


# Written by hand, not generated: a golden file regenerated with SLAQ_UPDATE_GOLDEN=1 is
# compared with itself, so these lines are what a regeneration cannot bless when wrong.
_MUST = {
    "shipped": ("B:USR1@120", "--requeue", 'LAUNCH=(srun --mpi="$MPI_PLUGIN" --kill-on-bad-exit=1)',
                "MAX_RESTARTS=10", "REQUEUE=1"),
    "full": ("B:USR1@600", "--requeue", "LAUNCH=(srun --mpi=pmix --kill-on-bad-exit=1 --cpu-bind=cores)",
             "MAX_RESTARTS=3", "REQUEUE=1"),
    "mpiexec": ("B:USR1@300", "--no-requeue",
                'LAUNCH=(/opt/mpich/bin/mpiexec -n "$SLURM_NTASKS" -bind-to core)', "MAX_RESTARTS=10",
                "REQUEUE=0"),
}
_EVERY_SCRIPT = (
    "trap 'STOP_ASKED=USR1' USR1",
    "trap 'STOP_ASKED=TERM' TERM",
    "trap '' USR1 TERM",
    'exec "$PYTHON" "$SLAQ_PKG/slurm/supervise.py" --run-dir "$RUN_DIR" --config "$CONFIG" \\',
    '    --launcher "$LAUNCHER" --requeue "$REQUEUE" --max-restarts "$MAX_RESTARTS" \\',
    '    --advice "$LAUNCH_ADVICE" ${STOP_ASKED:+--stop-asked "$STOP_ASKED"} -- \\',
    '    "${LAUNCH[@]}" "$PYTHON" "$SLAQ_PKG/__main__.py"',
)


def _rendered(which: str) -> tuple[str, Path]:
    if which == "shipped":
        return render_sbatch(SlurmSettings()), ROOT / "slurm" / "slaq.sbatch"
    if which == "full":
        s = settings_from_mapping(FULL, ranks=64, epoch_seconds=5.0, name="ignored")
        return (render_sbatch(s, config="/home/me/paper.yaml", run_dir="/scratch/me/slaq/runs/paper",
                              package=PACKAGE), GOLDEN / "full.sbatch")
    s = settings_from_mapping(MPIEXEC, ranks=4, epoch_seconds=1.0, name="small")
    return (render_sbatch(s, config="/tmp/x y/small.yaml", run_dir="/tmp/x y/runs/small"),
            GOLDEN / "mpiexec.sbatch")


@pytest.mark.parametrize("which", sorted(_MUST))
def test_the_lines_that_matter_are_as_written_by_hand(which: str) -> None:
    signal_at, requeue, launch, restarts, requeue_var = _MUST[which]
    text, path = _rendered(which)
    for script in (text, path.read_text()):
        lines = script.splitlines()
        first_command = next(i for i, line in enumerate(lines) if line and not line.startswith("#"))
        directives = [line for line in lines if line.startswith("#SBATCH ")]
        # sbatch reads #SBATCH lines only above the first command
        assert all(lines.index(d) < first_command for d in directives)
        assert [d for d in directives if "--signal" in d] == [f"#SBATCH --signal={signal_at}"]
        assert [d for d in directives if "requeue" in d] == [f"#SBATCH {requeue}"]
        for line in (launch, restarts, requeue_var, *_EVERY_SCRIPT):
            assert line in lines, (which, line)
        assert sum(line.startswith("LAUNCH=") for line in lines) == 1


def test_every_option_renders_like_the_golden_file() -> None:
    s = settings_from_mapping(FULL, ranks=64, epoch_seconds=5.0, name="ignored")
    text = render_sbatch(s, config="/home/me/paper.yaml", run_dir="/scratch/me/slaq/runs/paper",
                         package=PACKAGE)
    _golden("full.sbatch", text)
    assert "#SBATCH --no-kill" in text  # the default on more than one node
    assert "#SBATCH --constraint=ib" in text
    assert "#SBATCH --partition=compute,short" in text
    assert "LAUNCH=(srun --mpi=pmix --kill-on-bad-exit=1 --cpu-bind=cores)" in text


def test_mpiexec_launcher_renders_like_the_golden_file() -> None:
    s = settings_from_mapping(MPIEXEC, ranks=4, epoch_seconds=1.0, name="small")
    text = render_sbatch(s, config="/tmp/x y/small.yaml", run_dir="/tmp/x y/runs/small")
    _golden("mpiexec.sbatch", text)
    assert "#SBATCH --no-requeue" in text
    assert "CONFIG='/tmp/x y/small.yaml'" in text
    assert 'LAUNCH=(/opt/mpich/bin/mpiexec -n "$SLURM_NTASKS" -bind-to core)' in text


def test_the_ranks_run_the_package_slaq_submit_imported(tmp_path: Path) -> None:
    s = settings_from_mapping(MPIEXEC, ranks=4, epoch_seconds=1.0, name="small")
    text = render_sbatch(s, config="/c.yaml", run_dir="/r", package="/opt/v env/slaq_mpi")
    lines = text.splitlines()
    assert "SLAQ_PKG='/opt/v env/slaq_mpi'" in lines
    assert "-m slaq_mpi" not in text  # a checkout in the job's directory would shadow the package
    assert '    "${LAUNCH[@]}" "$PYTHON" "$SLAQ_PKG/__main__.py"' in lines
    cfg = tmp_path / "c.yaml"
    cfg.write_text("name: x\nranks: 2\njobs:\n  - {name: a, algorithm: logreg, dataset: "
                   "{generator: classification, rows: 10, features: 2}}\n")
    sub = slurm.Submission(settings=s, config=cfg, run_dir=tmp_path / "run", resume=False)
    assert f"SLAQ_PKG={shlex.quote(HERE_PKG)}" in sub.script().splitlines()


def test_rendered_scripts_are_valid_bash() -> None:
    for raw in (FULL, MPIEXEC, {}):
        s = settings_from_mapping(raw, ranks=64 if raw is FULL else 4, epoch_seconds=1.0)
        text = render_sbatch(s, config="/c.yaml", run_dir="/r")
        assert subprocess.run(["bash", "-n"], input=text, text=True).returncode == 0


def test_defaults_follow_the_experiment() -> None:
    s = settings_from_mapping({}, ranks=12, epoch_seconds=60.0, name="exp1")
    assert (s.ntasks, s.job_name, s.launcher, s.mpi) == (12, "exp1", "srun", "")
    assert s.signal_lead == 180  # three epochs when that exceeds the 120 s default


def test_settings_for_reads_the_spec_section(tmp_path: Path) -> None:
    from slaq_mpi.config import experiment as config

    cfg = _write_config(tmp_path, slurm={"time": "00:30:00", "partition": "debug"})
    spec = config.load(cfg)
    s = settings_for(spec)
    assert (s.time, s.partition, s.ntasks, s.job_name) == ("00:30:00", "debug", 4, "tiny")


@pytest.mark.parametrize("text, seconds", [
    ("30", 1800), ("5:30", 330), ("01:02:03", 3723), ("2-0", 172800), ("1-02:03", 93780),
    ("1-00:00:05", 86405), ("UNLIMITED", float("inf")),
])
def test_parse_time(text: str, seconds: float) -> None:
    assert parse_time(text) == seconds


@pytest.mark.parametrize("text", ["", "1:2:3:4", "a", "1-", "-5", "1-2:3:4:5", "1h"])
def test_parse_time_rejects(text: str) -> None:
    with pytest.raises(ValueError):
        parse_time(text)


@pytest.mark.parametrize("raw, where", [
    ({"walltime": "1:00:00"}, "slurm.walltime"),
    ({"nodes": 0}, "slurm.nodes"),
    ({"nodes": 9}, "slurm.nodes"),
    ({"ntasks": 4}, "slurm.ntasks"),
    ({"ntasks": "8"}, "slurm.ntasks"),
    ({"ntasks": 8, "cores": 16}, "slurm.cores"),
    ({"cores": 2}, "slurm.cores"),
    ({"time": "soon"}, "slurm.time"),
    ({"time": "0"}, "slurm.time"),
    ({"time": 90}, "slurm.time"),
    ({"time": True}, "slurm.time"),
    ({"time": "00:01:00"}, "slurm.time"),
    ({"time": "00:05:00", "signal_lead": 300}, "slurm.signal_lead"),
    ({"signal_lead": 1}, "slurm.signal_lead"),
    ({"signal_lead": 70000}, "slurm.signal_lead"),
    ({"partition": "gpu queue"}, "slurm.partition"),
    ({"account": "a;rm -rf"}, "slurm.account"),
    ({"job_name": ""}, "slurm.job_name"),
    ({"job_name": "jn\n"}, "slurm.job_name"),  # would end the #SBATCH line
    ({"mpi": "pmi2\n"}, "slurm.mpi"),
    ({"launcher": "ssh"}, "slurm.launcher"),
    ({"mpi": "none"}, "slurm.mpi"),
    ({"mpi": "PMI 2"}, "slurm.mpi"),
    ({"launcher": "mpiexec", "mpi": "pmi2"}, "slurm.mpi"),
    ({"mpiexec": "/usr/bin/mpiexec"}, "slurm.mpiexec"),
    ({"launcher_args": "--cpu-bind=cores"}, "slurm.launcher_args"),
    ({"requeue": "yes"}, "slurm.requeue"),
    ({"max_restarts": -1}, "slurm.max_restarts"),
    ({"output": "my log.out"}, "slurm.output"),
    ({"python": "python -X dev"}, "slurm.python"),
    ({"setup": 5}, "slurm.setup"),
    ({"extra": "--mem=1G"}, "slurm.extra"),
    ({"extra": ["mem=1G"]}, "slurm.extra[0]"),
    ({"extra": ["--mem=1G", "--time=10"]}, "slurm.extra[1]"),
    ({"extra": ["-t 10"]}, "slurm.extra[0]"),
    ({"extra": ["-n4"]}, "slurm.extra[0]"),
    ({"extra": ["--signal=USR2@60"]}, "slurm.extra[0]"),
    ({"extra": ["--open-mode=truncate"]}, "slurm.extra[0]"),
    ({"extra": ["--mem=1G", "--outp=/tmp/x.log"]}, "slurm.extra[1]"),  # sbatch: --output
    ({"extra": ["--open=truncate"]}, "slurm.extra[0]"),  # sbatch: --open-mode
    ({"extra": ["--mem=1G\n#SBATCH --time=1"]}, "slurm.extra[0]"),
    ({"launcher_args": ["--a\nrm -rf ~"]}, "slurm.launcher_args"),  # two script lines
    ({"setup": ["module load a\0b"]}, "slurm.setup"),  # a NUL byte in the script
    ({"ntasks": 2**70}, "slurm.ntasks"),
])
def test_bad_slurm_section_names_key_and_value(raw: dict[str, Any], where: str) -> None:
    with pytest.raises(ConfigError) as info:
        settings_from_mapping(raw, ranks=8, epoch_seconds=2.0)
    assert info.value.where == where
    assert info.value.allowed


def test_bad_section_type() -> None:
    with pytest.raises(ConfigError) as info:
        settings_from_mapping(["nodes", 2])  # type: ignore[arg-type]
    assert info.value.where == "slurm"


def test_extra_keeps_unmanaged_options() -> None:
    s = settings_from_mapping({"extra": ["--mem=1G", "#SBATCH  --exclusive", "-C ib", "--nodelist=n1",
                                         "--ntasks-per-node=4", "--time-min=10"]})
    assert s.extra == ("--mem=1G", "--exclusive", "-C ib", "--nodelist=n1", "--ntasks-per-node=4",
                       "--time-min=10")


def test_a_default_signal_lead_beyond_slurms_range_is_refused() -> None:
    with pytest.raises(ConfigError) as info:  # three epochs of 25,000 s: 75,000 s > 65,535
        settings_from_mapping({"time": "3-00:00:00"}, ranks=8, epoch_seconds=25000.0)
    assert info.value.where == "slurm.signal_lead" and "75000 s" in str(info.value)
    s = settings_from_mapping({"time": "3-00:00:00", "signal_lead": 60000}, ranks=8, epoch_seconds=25000.0)
    assert s.signal_lead == 60000


# --- the subprocess boundary ---------------------------------------------------------------

PENDING = "JobId=77 JobName=slaq JobState=PENDING Reason={} Restarts=0"


class FakeSlurm:
    """Stands in for run_cmd: records each argv and answers like Slurm would."""

    def __init__(self, answers: dict[str, tuple[int, str, str]]) -> None:
        self.answers = answers
        self.calls: list[tuple[list[str], str | None]] = []

    def __call__(self, argv: list[str], *, input: str | None = None, cwd: Any = None,
                 timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
        self.calls.append((list(argv), input))
        rc, out, err = self.answers[argv[0]]
        return subprocess.CompletedProcess(list(argv), rc, out, err)


@pytest.fixture
def no_subprocess(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any subprocess started around run_cmd fails the test."""

    def forbidden(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError(f"subprocess started outside run_cmd: {args!r}")

    for name in ("run", "Popen", "call", "check_call", "check_output"):
        monkeypatch.setattr(subprocess, name, forbidden)
    monkeypatch.setattr(os, "system", forbidden)


def _write_config(tmp_path: Path, slurm: dict[str, Any] | None = None) -> Path:
    text = textwrap.dedent(f"""\
        name: tiny
        output_dir: {tmp_path / 'runs' / 'tiny'}
        epoch_seconds: 1.0
        policy: fair
        ranks: 4
        jobs:
          - name: a
            algorithm: logreg
            dataset: {{generator: classification, rows: 200, features: 3, seed: 1}}
            stop: {{max_iterations: 5}}
        """)
    if slurm is not None:
        import yaml

        text += yaml.safe_dump({"slurm": slurm})
    path = tmp_path / "tiny.yaml"
    path.write_text(text)
    return path


def _sbatch_answers(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> FakeSlurm:
    """sbatch accepts job 4242, which is pending; the commands run in ``tmp_path``."""
    fake = FakeSlurm({"sbatch": (0, "4242\n", ""), "scontrol": (0, PENDING.format("Priority"), "")})
    monkeypatch.setattr(slurm, "run_cmd", fake)
    monkeypatch.chdir(tmp_path)
    return fake


def test_submit_goes_through_run_cmd(monkeypatch: pytest.MonkeyPatch, no_subprocess: None,
                                     tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fake = _sbatch_answers(monkeypatch, tmp_path)
    cfg = _write_config(tmp_path, slurm={"time": "00:10:00", "account": "lab"})
    assert cli.main(["submit", str(cfg)]) == 0
    assert [argv[:2] for argv, _ in fake.calls] == [["sbatch", "--parsable"], ["scontrol", "show"]]
    script = fake.calls[0][1]
    assert script is not None
    assert "#SBATCH --account=lab" in script and "#SBATCH --ntasks=4" in script
    assert f"CONFIG={cfg}" in script and f"RUN_DIR={tmp_path / 'runs' / 'tiny'}" in script
    out = capsys.readouterr().out
    assert "submitted batch job 4242" in out
    assert str(tmp_path / "slaq-tiny-4242.out") in out


MPI_LIST = ("MPI plugin types are...\n\tpmix\n\tnone\n\tpmi2\n"
            "specific pmix plugin versions available: pmix_v4\n")


def test_submit_notes_a_launch_this_host_says_would_fail(
        monkeypatch: pytest.MonkeyPatch, no_subprocess: None, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    fake = _sbatch_answers(monkeypatch, tmp_path)
    fake.answers["srun"] = (0, MPI_LIST, "")
    cfg = _write_config(tmp_path, slurm={"mpi": "pmi2x", "python": "venv/bin/python"})
    assert cli.main(["submit", str(cfg)]) == 0  # notes, not refusals: compute nodes may differ
    err = capsys.readouterr().err
    assert "slaq: note: slurm.mpi pmi2x: this host's srun offers none, pmi2, pmix (srun --mpi=list)" in err
    assert "slaq: note: slurm.python venv/bin/python is not an executable file here" in err
    assert [argv[0] for argv, _ in fake.calls] == ["srun", "sbatch", "scontrol"]
    # a plugin offered, an executable python: nothing to note
    fake.calls.clear()
    (tmp_path / "venv" / "bin").mkdir(parents=True)
    os.symlink(sys.executable, tmp_path / "venv" / "bin" / "python")
    cfg = _write_config(tmp_path, slurm={"mpi": "pmi2", "python": "venv/bin/python"})
    assert cli.main(["submit", str(cfg)]) == 0
    assert "note" not in capsys.readouterr().err
    # mpiexec as the launcher: its path is checked, srun is not asked
    fake.calls.clear()
    cfg = _write_config(tmp_path, slurm={"launcher": "mpiexec", "mpiexec": "/nowhere/mpiexec"})
    assert cli.main(["submit", str(cfg)]) == 0
    err = capsys.readouterr().err
    assert "slaq: note: slurm.mpiexec /nowhere/mpiexec is not an executable file here" in err
    assert [argv[0] for argv, _ in fake.calls] == ["sbatch", "scontrol"]


def test_dry_run_prints_the_script_and_runs_nothing(monkeypatch: pytest.MonkeyPatch, no_subprocess: None,
                                                    tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    fake = FakeSlurm({})
    monkeypatch.setattr(slurm, "run_cmd", fake)
    cfg = _write_config(tmp_path)
    assert cli.main(["submit", str(cfg), "--dry-run"]) == 0
    assert fake.calls == []
    out = capsys.readouterr().out
    assert out.startswith("#!/bin/bash\n")
    assert "#SBATCH --job-name=tiny" in out and "#SBATCH --signal=B:USR1@120" in out


def test_submit_resumes_only_an_unfinished_run_of_the_same_config(
        monkeypatch: pytest.MonkeyPatch, no_subprocess: None, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    fake = _sbatch_answers(monkeypatch, tmp_path)
    cfg = _write_config(tmp_path)
    run = tmp_path / "runs" / "tiny"
    run.mkdir(parents=True)
    (run / "config.yaml").write_text(cfg.read_text().replace("ranks: 4", "ranks: 5"))
    (run / "state.json").write_text('{"epoch": 3, "elapsed": 6.0, "finished": false}')
    assert cli.main(["submit", str(cfg)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "holds an earlier run of another config" in err, err
    assert cli.main(["submit", str(cfg), "--dry-run"]) == 0  # the script, and what a submit refuses
    captured = capsys.readouterr()
    assert captured.out.startswith("#!/bin/bash\n") and f"RUN_DIR={run}" in captured.out
    assert captured.err.count("\n") == 1, captured.err
    assert captured.err.startswith("slaq: note: slaq submit would refuse it: output_dir: ")
    assert "holds an earlier run of another config" in captured.err
    assert fake.calls == []
    (run / "config.yaml").write_text(cfg.read_text())  # the same config, not finished: resumed
    assert cli.main(["submit", str(cfg)]) == 0
    captured = capsys.readouterr()
    assert "holds an earlier run of this config; the job will resume it" in captured.err
    assert "submitted batch job 4242" in captured.out
    # a longer time limit for the rest of the run changes only slurm:, which a resume ignores
    (run / "config.yaml").write_text(cfg.read_text() + "slurm: {time: '00:10:00'}\n")
    assert cli.main(["submit", str(cfg)]) == 0
    assert "the job will resume it" in capsys.readouterr().err
    fake.calls.clear()
    (run / "config.yaml").unlink()
    assert cli.main(["submit", str(cfg)]) == 2
    assert "holds an earlier run without a readable config.yaml" in capsys.readouterr().err
    (run / "config.yaml").write_text(cfg.read_text())
    record = RunRecord(attrs={"name": "tiny", "policy": "fair", "mode": "run", "capacity": 3},
                       jobs={"a": JobRecord(name="a", algorithm="logreg", convergence="linear",
                                            arrival=0.0, max_cores=3, status="done")})
    record.write(run / "metrics.h5")
    (run / "state.json").write_text('{"epoch": 9, "elapsed": 20.0, "finished": true}')
    assert cli.main(["submit", str(cfg)]) == 2
    assert "holds a finished run of this config; nothing to resume" in capsys.readouterr().err
    assert fake.calls == []


def test_dry_run_prints_the_script_and_notes_what_a_submit_would_refuse(
        monkeypatch: pytest.MonkeyPatch, no_subprocess: None, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    fake = FakeSlurm({})
    monkeypatch.setattr(slurm, "run_cmd", fake)
    monkeypatch.chdir(tmp_path)
    cfg = _write_config(tmp_path, slurm={"output": "nologs/%x-%j.out"})
    assert cli.main(["submit", str(cfg)]) == 2
    refusal = capsys.readouterr().err
    assert refusal.startswith("slaq: error: slurm.output: 'nologs/%x-%j.out' is not allowed; its "
                              f"directory {tmp_path / 'nologs'} does not exist"), refusal
    assert cli.main(["submit", str(cfg), "--dry-run"]) == 0
    captured = capsys.readouterr()
    assert captured.out.startswith("#!/bin/bash\n") and "#SBATCH --output=nologs/%x-%j.out" in captured.out
    assert captured.err == refusal.replace("slaq: error: ", "slaq: note: slaq submit would refuse it: ")
    assert fake.calls == []
    # the README's sequence: a dry run after the run finished in the output_dir
    run = tmp_path / "runs" / "tiny"
    run.mkdir(parents=True)
    (run / "config.yaml").write_text(_write_config(tmp_path).read_text())
    (run / "state.json").write_text('{"epoch": 9, "elapsed": 20.0, "finished": true}')
    RunRecord(attrs={"name": "tiny", "policy": "fair", "mode": "run", "capacity": 3},
              jobs={"a": JobRecord(name="a", algorithm="logreg", convergence="linear", arrival=0.0,
                                   max_cores=3, status="done")}).write(run / "metrics.h5")
    assert cli.main(["submit", str(cfg), "--dry-run"]) == 0
    captured = capsys.readouterr()
    assert captured.out.startswith("#!/bin/bash\n")
    assert "slaq: note: slaq submit would refuse it: output_dir: " in captured.err
    assert "holds a finished run of this config" in captured.err
    # a YAML that is refused leaves no script to show
    cfg.write_text(cfg.read_text() + "bogus: 1\n")
    assert cli.main(["submit", str(cfg), "--dry-run"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.startswith("slaq: error: ") and "bogus" in captured.err


def test_validate_notes_what_submit_would_refuse_in_the_slurm_section(
        monkeypatch: pytest.MonkeyPatch, no_subprocess: None, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    """docs/slurm.md's `output: logs/%x-%j.out` without a logs/ directory: validate and submit
    make the one check of slurm: (slurm.submit.check_slurm); validate notes what submit refuses."""
    monkeypatch.setattr(slurm, "run_cmd", FakeSlurm({}))
    monkeypatch.chdir(tmp_path)
    cfg = _write_config(tmp_path, slurm={"output": "logs/%x-%j.out"})
    assert cli.main(["submit", str(cfg)]) == 2
    refusal = capsys.readouterr().err.removeprefix("slaq: error: ")
    assert refusal.startswith("slurm.output: "), refusal
    assert cli.main(["validate", str(cfg)]) == 0
    out = capsys.readouterr().out
    assert f"{cfg}: note: slaq submit would refuse it here: {refusal}" in out, out
    (tmp_path / "logs").mkdir()
    assert cli.main(["validate", str(cfg)]) == 0
    assert "slaq submit" not in capsys.readouterr().out
    cfg = _write_config(tmp_path, slurm={"chdir": "nowhere"})
    assert cli.main(["validate", str(cfg)]) == 0
    assert (f"note: slaq submit would refuse it here: slurm.chdir: 'nowhere' is not allowed; the "
            f"directory {tmp_path / 'nowhere'} does not exist") in capsys.readouterr().out


@pytest.mark.parametrize("section, python", [
    (None, shlex.quote(sys.executable)),  # the Python running `slaq submit`: its venv need not be active
    ({"python": "/opt/py/bin/python3"}, "/opt/py/bin/python3"),
    ({"setup": ["export OMP_NUM_THREADS=1"]}, shlex.quote(sys.executable)),  # a setup alone changes nothing
    ({"setup": ["source ~/venvs/slaq/bin/activate"], "python": "python3"}, "python3"),  # the setup's venv
])
def test_submit_picks_the_python(monkeypatch: pytest.MonkeyPatch, no_subprocess: None, tmp_path: Path,
                                 capsys: pytest.CaptureFixture[str], section: dict[str, Any] | None,
                                 python: str) -> None:
    monkeypatch.setattr(slurm, "run_cmd", FakeSlurm({}))
    assert cli.main(["submit", str(_write_config(tmp_path, slurm=section)), "--dry-run"]) == 0
    assert f"\nPYTHON={python}\n" in capsys.readouterr().out


def test_submit_rejects_a_bad_slurm_section(monkeypatch: pytest.MonkeyPatch, no_subprocess: None,
                                            tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fake = FakeSlurm({})
    monkeypatch.setattr(slurm, "run_cmd", fake)
    cfg = _write_config(tmp_path, slurm={"launcher": "ssh"})
    assert cli.main(["submit", str(cfg)]) == 2
    assert fake.calls == []
    assert "slurm.launcher" in capsys.readouterr().err


def test_submit_refuses_a_log_directory_that_does_not_exist(
        monkeypatch: pytest.MonkeyPatch, no_subprocess: None, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    fake = _sbatch_answers(monkeypatch, tmp_path)
    cfg = _write_config(tmp_path, slurm={"output": "nologs/%x-%j.out"})
    assert cli.main(["submit", str(cfg)]) == 2
    assert fake.calls == []  # nothing submitted
    err = capsys.readouterr().err
    assert "slurm.output" in err and "nologs" in err and "does not exist" in err
    (tmp_path / "nologs").mkdir()
    assert cli.main(["submit", str(cfg)]) == 0
    assert fake.calls and fake.calls[0][0][0] == "sbatch"
    capsys.readouterr()
    (tmp_path / "logs").mkdir()
    for section, key in (({"output": "logs-%x/%j.out"}, "slurm.output"),  # %x is known: checked
                         ({"output": "logs"}, "slurm.output"),  # a directory, not a log file
                         ({"chdir": "nowhere"}, "slurm.chdir")):
        fake.calls.clear()
        assert cli.main(["submit", str(_write_config(tmp_path, slurm=section))]) == 2
        assert fake.calls == [] and key in capsys.readouterr().err


def test_submit_takes_relative_paths_from_slurm_chdir_as_the_job_does(
        monkeypatch: pytest.MonkeyPatch, no_subprocess: None, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    from slaq_mpi.data import datasets, generators

    fake = _sbatch_answers(monkeypatch, tmp_path)  # submitted from tmp_path
    (tmp_path / "work").mkdir()
    spec = datasets.DatasetSpec(generator="classification", params={"rows": 200, "features": 3})
    generators.generate(spec, tmp_path / "work" / "data.h5", 1)
    text = _write_config(tmp_path).read_text()
    text = text.replace(f"output_dir: {tmp_path / 'runs' / 'tiny'}", "output_dir: runs/tiny")
    text = text.replace("{generator: classification, rows: 200, features: 3, seed: 1}", "{path: data.h5}")
    cfg = tmp_path / "rel.yaml"
    cfg.write_text(text + "slurm: {chdir: work}\n")
    # the data file is in the job's directory, not in the one we submit from
    assert cli.main(["submit", str(cfg)]) == 0, capsys.readouterr().err
    script = fake.calls[0][1]
    assert script is not None and f"RUN_DIR={tmp_path / 'work' / 'runs' / 'tiny'}" in script
    assert Path.cwd() == tmp_path  # back where it was
    capsys.readouterr()
    fake.calls.clear()
    (tmp_path / "work" / "data.h5").rename(tmp_path / "data.h5")  # now only beside the submit
    assert cli.main(["submit", str(cfg)]) == 2
    err = capsys.readouterr().err
    assert "jobs[0].dataset.path" in err and "does not exist" in err and fake.calls == []
    assert Path.cwd() == tmp_path


def test_submit_checks_a_resumed_run_where_it_started(
        monkeypatch: pytest.MonkeyPatch, no_subprocess: None, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    import json

    import h5py

    from slaq_mpi.data import datasets, generators
    from slaq_mpi.data.datasets import fingerprint

    fake = _sbatch_answers(monkeypatch, tmp_path)  # submitted from tmp_path
    proj = tmp_path / "proj"  # where the run was started by hand, then stopped
    (proj / "data").mkdir(parents=True)
    data = proj / "data" / "t.h5"
    spec = datasets.DatasetSpec(generator="classification", params={"rows": 200, "features": 3})
    generators.generate(spec, data, 1)
    text = _write_config(tmp_path).read_text().replace(
        "{generator: classification, rows: 200, features: 3, seed: 1}", "{path: data/t.h5}")
    cfg = tmp_path / "rel.yaml"
    cfg.write_text(text)
    run = tmp_path / "runs" / "tiny"
    run.mkdir(parents=True)
    (run / "config.yaml").write_text(text)
    (run / "state.json").write_text('{"epoch": 3, "elapsed": 6.0, "finished": false}')
    with h5py.File(run / "metrics.h5", "w") as f:
        f.attrs["workdir"] = str(proj)
        f.attrs["data_files"] = json.dumps({"a": [str(data), fingerprint(data)]})
    assert not (tmp_path / "data").exists()  # not where we submit from: found where it started
    assert cli.main(["submit", str(cfg)]) == 0, capsys.readouterr().err
    assert "the job will resume it" in capsys.readouterr().err and fake.calls
    fake.calls.clear()
    generators.generate(spec, data, 2)  # other data since the run started: refused now
    assert cli.main(["submit", str(cfg)]) == 2
    err = capsys.readouterr().err
    assert "job a's data file" in err and "changed since the run started" in err and not fake.calls
    # worded for submit, whose user typed no --resume: the config's output_dir holds that run
    assert err.startswith(f"slaq: error: output_dir: {str(run)!r} is not allowed") and "--resume" not in err
    assert err.rstrip().endswith("move this earlier run away for a fresh one (the job would resume it)")


def test_the_script_by_hand_refuses_a_run_dir_it_would_not_start_in(tmp_path: Path) -> None:
    script = tmp_path / "job.sbatch"
    script.write_text(render_sbatch(settings_from_mapping({"python": sys.executable})))
    cfg = _write_config(tmp_path)  # output_dir: tmp_path/runs/tiny
    env = {**os.environ, "PATH": f"{tmp_path / 'nobin'}:/usr/bin:/bin"}  # no srun: never launched
    proc = subprocess.run(["bash", str(script), str(cfg), str(tmp_path / "elsewhere")], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.strip().splitlines() == [
        f"slaq.sbatch: RUN_DIR {tmp_path / 'elsewhere'} holds no run to resume, and a new run of "
        f"{cfg} goes into its output_dir {tmp_path / 'runs' / 'tiny'}: leave RUN_DIR out, or give "
        "a run directory to resume"]
    assert not (tmp_path / "elsewhere").exists() and not (tmp_path / "runs").exists()


@pytest.mark.parametrize("config", ["typo.yaml", "missing.yaml"])
def test_the_script_by_hand_refuses_a_bad_config_in_one_line_before_any_launch(
        tmp_path: Path, config: str) -> None:
    script = tmp_path / "job.sbatch"
    script.write_text(render_sbatch(settings_from_mapping({"python": sys.executable})))
    (tmp_path / "typo.yaml").write_text(_write_config(tmp_path).read_text().replace(
        "epoch_seconds", "epoch_second"))
    env = {**os.environ, "PATH": f"{tmp_path / 'nobin'}:/usr/bin:/bin"}  # no srun: never launched
    proc = subprocess.run(["bash", str(script), config], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("slaq: error: "), proc.stderr
    assert ("epoch_second: unknown key" if config == "typo.yaml" else "missing.yaml") in lines[0]
    assert proc.stdout == ""  # not "starting ... into" an empty run directory
    assert not (tmp_path / "runs").exists()


def test_the_script_stops_at_once_when_its_python_lacks_slaq(tmp_path: Path) -> None:
    script = tmp_path / "job.sbatch"
    script.write_text(render_sbatch(settings_from_mapping({"python": sys.executable + "-missing"}),
                                    config=str(tmp_path / "x.yaml"), run_dir=str(tmp_path / "run")))
    proc = subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert "cannot import slaq_mpi" in proc.stderr and "slurm.python" in proc.stderr
    assert not (tmp_path / "run").exists()


def test_sbatch_failure_is_reported(monkeypatch: pytest.MonkeyPatch, no_subprocess: None,
                                    tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    msg = "sbatch: error: invalid partition specified: nope"
    monkeypatch.setattr(slurm, "run_cmd", FakeSlurm({"sbatch": (1, "", msg)}))
    cfg = _write_config(tmp_path)
    assert cli.main(["submit", str(cfg)]) == 2
    err = capsys.readouterr().err
    assert "invalid partition specified: nope" in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("answer, job_id", [("17\n", "17"), ("123;cluster2\n", "123"),
                                            ("sbatch: warning: x\n99\n", "99")])
def test_submit_parses_the_job_id(monkeypatch: pytest.MonkeyPatch, no_subprocess: None,
                                  answer: str, job_id: str) -> None:
    monkeypatch.setattr(slurm, "run_cmd", FakeSlurm({"sbatch": (0, answer, ""),
                                                     "scontrol": (0, PENDING.format("None"), "")}))
    assert slurm.submit("#!/bin/bash\n") == job_id


@pytest.mark.parametrize(("reason", "refused"), [
    ("PartitionConfig", True), ("PartitionNodeLimit", True), ("BadConstraints", True),
    ("ReqNodeNotAvail", False),  # drained or down nodes: it runs after the maintenance
    ("Priority", False), ("Resources", False), ("None", False),
])
def test_a_job_slurm_would_never_start_is_cancelled(monkeypatch: pytest.MonkeyPatch, no_subprocess: None,
                                                    reason: str, refused: bool) -> None:
    fake = FakeSlurm({"sbatch": (0, "77\n", ""), "scontrol": (0, PENDING.format(reason), ""),
                      "scancel": (0, "", "")})
    monkeypatch.setattr(slurm, "run_cmd", fake)
    if refused:
        with pytest.raises(SlurmError, match=f"would never start job 77 \\(Reason={reason}"):
            slurm.submit("#!/bin/bash\n")
        assert fake.calls[-1][0] == ["scancel", "77"]
    else:
        assert slurm.submit("#!/bin/bash\n") == "77"
        assert "scancel" not in [argv[0] for argv, _ in fake.calls]


def test_submit_rejects_a_non_id(monkeypatch: pytest.MonkeyPatch, no_subprocess: None) -> None:
    monkeypatch.setattr(slurm, "run_cmd", FakeSlurm({"sbatch": (0, "Submitted batch job\n", "")}))
    with pytest.raises(SlurmError):
        slurm.submit("#!/bin/bash\n")


def test_job_info_parses_scontrol(monkeypatch: pytest.MonkeyPatch, no_subprocess: None) -> None:
    line = ("JobId=7 JobName=slaq UserId=root(0) JobState=PENDING Reason=BeginTime Restarts=1 "
            "ExitCode=0:0 Command=(null)\n")
    fake = FakeSlurm({"scontrol": (0, line, "")})
    monkeypatch.setattr(slurm, "run_cmd", fake)
    info = slurm.job_info("7")
    assert fake.calls[0][0] == ["scontrol", "show", "job", "--oneliner", "7"]
    assert (info["JobState"], info["Restarts"], info["Reason"]) == ("PENDING", "1", "BeginTime")
    monkeypatch.setattr(slurm, "run_cmd", FakeSlurm({"scontrol": (1, "", "slurm_load_jobs error: "
                                                                  "Invalid job id specified")}))
    assert slurm.job_info("8") == {}


def test_run_cmd_reports_status_and_missing_commands() -> None:
    proc = slurm.run_cmd(["sh", "-c", "cat; echo err >&2; exit 3"], input="in")
    assert (proc.returncode, proc.stdout, proc.stderr) == (3, "in", "err\n")
    with pytest.raises(SlurmError, match="command not found"):
        slurm.run_cmd(["slaq-no-such-command-xyz"])


# --- the batch script's logic, run by bash with fake mpiexec and scontrol --------------------

FAKE_MPIEXEC = """\
#!/bin/bash
# Fake launcher: records its arguments, then behaves as $FAKE_MODE says.
echo "$*" >> "$FAKE_LOG/launch"
run_dir=$FAKE_RUN_DIR
# rank 0 writes its pid into the lock file beside the run directory as it starts
if [ "${FAKE_MODE#launch-}" = "$FAKE_MODE" ]; then
    mkdir -p "$(dirname "$run_dir")"; echo "pid $$" > "$(dirname "$run_dir")/.$(basename "$run_dir").lock"
fi
case $FAKE_MODE in
    done) exit 0 ;;
    fail) exit 1 ;;
    launch-fail) echo "launcher: no ranks started" >&2; exit 1 ;;
    launch-nothing) exit 0 ;;
    stop) exit 75 ;;  # a stop asked inside the run (RUN_DIR/STOP, a signal to rank 0)
    signalled)
        # Slurm signals the batch shell (time limit, preemption, scancel): its trap asks for the stop
        mkdir -p "$run_dir"; echo '{}' > "$run_dir/state.json"
        kill -"${FAKE_SIGNAL:-USR1}" "$PPID"   # the batch job's process: the supervisor, exec'd
        while [ ! -e "$run_dir/STOP" ]; do sleep 0.05; done
        rm -f "$run_dir/STOP"; exit 75 ;;
    wait-stop)
        mkdir -p "$run_dir"; echo '{}' > "$run_dir/state.json"; touch "$FAKE_LOG/started"
        while [ ! -e "$run_dir/STOP" ]; do sleep 0.05; done
        rm -f "$run_dir/STOP"; exit 75 ;;
    late-run-dir)
        # The run owns RUN_DIR only after a while (a fresh start writes state.json after epoch 0).
        touch "$FAKE_LOG/started"
        while [ ! -e "$FAKE_LOG/go" ]; do sleep 0.05; done
        mkdir -p "$run_dir"; echo '{}' > "$run_dir/state.json"
        while [ ! -e "$run_dir/STOP" ]; do sleep 0.05; done
        rm -f "$run_dir/STOP"; exit 75 ;;
esac
"""

FAKE_SCONTROL = """\
#!/bin/bash
# Fake scontrol: answers `show job` with $FAKE_JOB_STATE; records every other command.
if [ "$1" = show ]; then
    echo "JobId=$SLURM_JOB_ID JobState=${FAKE_JOB_STATE:-RUNNING} Reason=${FAKE_REASON:-None} Restarts=0"
    exit 0
fi
echo "$*" >> "$FAKE_LOG/scontrol"
"""


@pytest.fixture
def fake_cluster(tmp_path: Path) -> dict[str, Any]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in (("mpiexec", FAKE_MPIEXEC), ("scontrol", FAKE_SCONTROL)):
        path = bin_dir / name
        path.write_text(text)
        path.chmod(path.stat().st_mode | stat.S_IXUSR)
    logs = tmp_path / "log"
    logs.mkdir()
    run_dir = tmp_path / "run"
    settings = settings_from_mapping({"launcher": "mpiexec", "mpiexec": str(bin_dir / "mpiexec"),
                                      "max_restarts": 2, "python": sys.executable}, ranks=4)
    script = tmp_path / "job.sbatch"
    script.write_text(render_sbatch(settings, config=str(tmp_path / "c.yaml"), run_dir=str(run_dir),
                                    package=HERE_PKG))
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "FAKE_LOG": str(logs),
           "FAKE_RUN_DIR": str(run_dir), "SLURM_JOB_ID": "31", "SLURM_NTASKS": "4"}
    return {"script": script, "env": env, "logs": logs, "run_dir": run_dir, "cfg": tmp_path / "c.yaml"}


def _run_script(fc: dict[str, Any], mode: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", str(fc["script"])], env={**fc["env"], "FAKE_MODE": mode, **env},
                          capture_output=True, text=True, timeout=60)


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def test_script_starts_fresh_and_finishes(fake_cluster: dict[str, Any]) -> None:
    proc = _run_script(fake_cluster, "done")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    launched = f"-n 4 {sys.executable} {HERE_PKG}/__main__.py run {fake_cluster['cfg']}"
    assert _lines(fake_cluster["logs"] / "launch") == [launched]
    assert _lines(fake_cluster["logs"] / "scontrol") == []
    assert "every job done" in proc.stdout


def test_script_resumes_when_state_exists(fake_cluster: dict[str, Any]) -> None:
    run_dir = fake_cluster["run_dir"]
    run_dir.mkdir()
    (run_dir / "state.json").write_text("{}")
    (run_dir / "STOP").write_text("")  # left over from an earlier signal: must not stop this start
    proc = _run_script(fake_cluster, "fail")
    assert proc.returncode == 1
    launched = f"-n 4 {sys.executable} {HERE_PKG}/__main__.py run --resume {run_dir}"
    assert _lines(fake_cluster["logs"] / "launch") == [launched]
    assert not (run_dir / "STOP").exists()


def test_script_says_when_the_launch_failed_before_the_run(fake_cluster: dict[str, Any]) -> None:
    # no rank 0 ran (the launcher failed, or said 0 having run nothing) / a job failed
    for mode, status in (("launch-fail", 3), ("launch-nothing", 3), ("fail", 1)):
        proc = _run_script(fake_cluster, mode)
        assert proc.returncode == status, proc.stdout + proc.stderr
        said = "the MPI launch failed before the run started (status " in proc.stdout
        assert said == mode.startswith("launch-"), proc.stdout
        assert ("at least one job failed" in proc.stdout) == (mode == "fail"), proc.stdout
    assert _lines(fake_cluster["logs"] / "scontrol") == []


@pytest.mark.parametrize(("library", "plugins", "plugin"), [
    ("Open MPI v4.1.4, package: Debian OpenMPI, ident: 4.1.4", "pmix pmi2", "pmix"),
    ("Open MPI v4.1.4, package: Debian OpenMPI, ident: 4.1.4", "pmi2", "pmi2"),  # no PMIx here
    ("MPICH Version:      5.0.2", "pmix pmi2", "pmi2"),
])
def test_script_picks_srun_mpi_plugin_from_the_mpi_library(tmp_path: Path, library: str, plugins: str,
                                                           plugin: str) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fakes = {
        # the job's Python: answers the import check with the MPI library's version line
        # (and runs the supervisor with the real one)
        "python": (f'#!/bin/bash\n[ "$1" = -c ] && {{ echo "{library}"; exit 0; }}\n'
                   f'exec {sys.executable} "$@"\n'),
        "srun": ('#!/bin/bash\nif [ "$1" = --mpi=list ]; then\n'
                 f'    echo "MPI plugin types are..."; for p in none {plugins}; do echo "\t$p"; done\n'
                 '    exit 0\nfi\necho "$*" >> "$FAKE_LOG/launch"\n'),
    }
    for name, text in fakes.items():
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    settings = settings_from_mapping({"python": str(bin_dir / "python")}, ranks=4)
    script = tmp_path / "job.sbatch"
    script.write_text(render_sbatch(settings, config=str(tmp_path / "c.yaml"), run_dir=str(tmp_path / "run"),
                                    package=HERE_PKG))
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "FAKE_LOG": str(tmp_path)}
    proc = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True, timeout=60)
    launched = _lines(tmp_path / "launch")
    assert len(launched) == 1 and launched[0].startswith(f"--mpi={plugin} --kill-on-bad-exit=1 "), launched
    assert f"MPI: {library}; launcher: srun --mpi={plugin}" in proc.stdout


def test_script_requeues_after_a_graceful_stop(fake_cluster: dict[str, Any]) -> None:
    proc = _run_script(fake_cluster, "signalled")
    assert proc.returncode == 0, proc.stdout
    assert _lines(fake_cluster["logs"] / "scontrol") == ["requeue 31"]


def test_script_does_not_requeue_a_stop_asked_inside_the_run(fake_cluster: dict[str, Any]) -> None:
    # the user created RUN_DIR/STOP (or signalled rank 0): "stop for a later resume", not a restart
    proc = _run_script(fake_cluster, "stop")
    assert proc.returncode == 75
    assert _lines(fake_cluster["logs"] / "scontrol") == []
    assert "stopped with checkpoints on request (RUN_DIR/STOP or a signal to rank 0), not " \
           "requeued; resume with: slaq run --resume" in proc.stdout


@pytest.mark.parametrize("state", ["COMPLETING", "CANCELLED"])
def test_script_does_not_requeue_a_cancelled_job(fake_cluster: dict[str, Any], state: str) -> None:
    # scancel sends TERM, which stops the run gracefully (exit 75); the job must then stay ended.
    # (What a real Slurm 22.05 showed in the trap after a plain scancel: COMPLETING, Reason=None.)
    proc = _run_script(fake_cluster, "signalled", FAKE_SIGNAL="TERM", FAKE_JOB_STATE=state)
    assert proc.returncode == 75
    assert _lines(fake_cluster["logs"] / "scontrol") == []
    assert "ended by Slurm (scancel, or scontrol requeue, which restarts it): stopped with " \
           "checkpoints" in proc.stdout


def test_script_requeues_a_job_stopped_at_its_time_limit(fake_cluster: dict[str, Any]) -> None:
    # at the limit Slurm sends TERM with the job COMPLETING, Reason=TimeLimit: requeue it
    proc = _run_script(fake_cluster, "signalled", FAKE_SIGNAL="TERM", FAKE_JOB_STATE="COMPLETING",
                       FAKE_REASON="TimeLimit")
    assert proc.returncode == 0
    assert _lines(fake_cluster["logs"] / "scontrol") == ["requeue 31"]


def test_script_stops_requeueing_after_max_restarts(fake_cluster: dict[str, Any]) -> None:
    proc = _run_script(fake_cluster, "signalled", SLURM_RESTART_COUNT="2")
    assert proc.returncode == 75
    assert _lines(fake_cluster["logs"] / "scontrol") == []
    assert "resume with: slaq run --resume" in proc.stdout


def _wait_for_file(path: Path, proc: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + 30  # a safety net only
    while not path.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert path.exists(), f"{path.name} never appeared"


@pytest.mark.parametrize("sig, mode", [(signal.SIGUSR1, "wait-stop"), (signal.SIGTERM, "wait-stop"),
                                       (signal.SIGUSR1, "late-run-dir")])
def test_signal_to_the_batch_shell_stops_gracefully_and_requeues(fake_cluster: dict[str, Any],
                                                                 sig: signal.Signals, mode: str) -> None:
    env = {**fake_cluster["env"], "FAKE_MODE": mode}
    proc = subprocess.Popen(["bash", str(fake_cluster["script"])], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        _wait_for_file(fake_cluster["logs"] / "started", proc)
        proc.send_signal(sig)
        if mode == "late-run-dir":  # the signal came before the run owned RUN_DIR
            _wait_for_file(fake_cluster["logs"] / "started", proc)
            (fake_cluster["logs"] / "go").touch()
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, out
    assert f"got SIG{sig.name[3:]}: asking for a graceful stop" in out
    assert _lines(fake_cluster["logs"] / "scontrol") == ["requeue 31"]
    assert not (fake_cluster["run_dir"] / "STOP").exists()


def test_a_home_relative_path_is_expanded_for_slurm(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", "/home/ada")
    s = settings_from_mapping({"chdir": "~/exp", "output": "~/logs/%j.out", "python": "~/venv/bin/python"},
                              ranks=4, epoch_seconds=1.0, name="x")
    assert (s.chdir, s.output, s.python) == (
        "/home/ada/exp", "/home/ada/logs/%j.out", "/home/ada/venv/bin/python")
    text = render_sbatch(s)
    assert "#SBATCH --chdir=/home/ada/exp" in text and "~" not in text.split("\n\n")[0]
