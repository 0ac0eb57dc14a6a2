"""What a resumed run must find in its run directory, checked before any rank starts: its
history readable, its config and data unchanged; and whether it has finished already."""

from __future__ import annotations

import json
import os
import shlex
from pathlib import Path

from slaq_mpi.config.experiment import ExperimentSpec
from slaq_mpi.errors import DAMAGED_FILE_ERRORS, EXIT_DONE, EXIT_FAILED, ConfigError


def resume_path(text: str) -> Path:
    """The absolute run directory ``--resume text`` means: ``a/../b`` is shown as ``b``, unless
    ``a`` is a link (then ``..`` leaves the link's target, and the text is kept as given)."""
    given = Path(text).absolute()
    tidy = Path(os.path.abspath(given))
    return tidy if tidy.resolve() == given.resolve() else given


def finished_status(run_dir: Path) -> int | None:
    """The exit status of a finished run (1 if a job failed, else 0); None if it can go on."""
    try:
        finished = bool(json.loads((run_dir / "state.json").read_text()).get("finished"))
        if not finished:
            return None
        from slaq_mpi.storage.metrics import read_metrics

        jobs = read_metrics(run_dir).jobs.values()
    except (OSError, ValueError, AttributeError):
        return None  # let the run itself look at it
    return EXIT_FAILED if any(j.status == "failed" for j in jobs) else EXIT_DONE


def say_finished(run_dir: Path) -> None:
    """Say that the run in ``run_dir`` has finished and where its results are."""
    print(f"slaq: {run_dir} has finished; nothing to resume (slaq report "
          f"{shlex.quote(str(run_dir))} shows its results)", flush=True)


def saved_text(run_dir: Path, key: str) -> str | None:
    """The text attribute ``key`` of the run's metrics.h5 (None: no such attribute, or no
    readable metrics yet)."""
    from slaq_mpi.storage.metrics import text_attribute

    return text_attribute(run_dir / "metrics.h5", key)


def check_history(run_dir: Path) -> None:
    """Refuse to resume a run whose metrics.h5 (its history, read back by rank 0) is missing or
    cannot be read, before any rank starts."""
    from slaq_mpi.storage.metrics import RunRecord

    try:
        RunRecord.read(run_dir / "metrics.h5")
        return
    except FileNotFoundError:
        why = "it is missing"
    except OSError as exc:
        if exc.errno is not None:  # the file system, not the file (h5py gives damage no errno)
            raise ConfigError("--resume", str(run_dir), f"its metrics.h5 cannot be read now "
                              f"({exc.strerror or exc}); fix that, then resume again") from None
        why = f"it cannot be read ({exc})"
    except DAMAGED_FILE_ERRORS as exc:
        why = f"it cannot be read ({exc})"
    raise ConfigError("--resume", str(run_dir), f"its metrics.h5 holds the run's history and {why}; "
                      "the run cannot be resumed: start a new run with slaq run CONFIG")


def start_dir(run_dir: Path) -> Path | None:
    """The directory the run in ``run_dir`` started in (kept in metrics.h5), where a resume
    reads its config's relative paths; None if not kept, or gone."""
    start = saved_text(run_dir, "workdir")
    return Path(start) if start is not None and Path(start).is_dir() else None


def check_unchanged(run_dir: Path, saved: Path) -> None:
    """Refuse a resume whose config.yaml differs from the config the run started with (kept
    in metrics.h5): jobs added, removed or changed cannot be carried on from checkpoints."""
    original = saved_text(run_dir, "config")  # None: nothing to compare with (checkpoints decide)
    if original is not None and saved.read_text() != original:
        raise ConfigError("--resume", str(run_dir), f"its {saved.name} differs from the config the run "
                          "started with (kept in metrics.h5); a resumed run must use it unchanged: "
                          "restore it, or start a new run with slaq run CONFIG")


def check_data_unchanged(run_dir: Path, spec: ExperimentSpec, where: str = "--resume",
                         fresh: str = "start a new run with slaq run CONFIG") -> None:
    """Refuse to resume a run whose data changed since it started (fingerprints kept in
    metrics.h5): the jobs would go on training on other data, silently.

    The files checked are those the resumed ``spec`` reads (its paths resolved now, from the
    start directory or from here), each against the fingerprint its job's file had at the
    start: a link pointed at another file is seen, a project directory renamed is not refused.
    ``where`` and ``fresh`` word the refusal for the command that resumes (the option that
    named the run, and how to start afresh instead).

    Raises:
        ConfigError: naming the job, the file and what to do.
    """
    from slaq_mpi.data.datasets import fingerprint_matches

    kept = saved_text(run_dir, "data_files")
    if kept is None:
        return  # no fingerprints kept: nothing to check
    paths = {j.name: j.dataset.path for j in spec.jobs if j.dataset.path}
    now: dict[tuple[str, str], bool] = {}  # a file shared by jobs is read once
    for job, (then, was) in sorted(json.loads(kept).items()):
        path = paths.get(job, then)
        named = path if path == then else f"{path} ({then} when the run started)"
        if (path, was) not in now:
            try:
                now[path, was] = fingerprint_matches(path, was)
            except OSError as exc:
                raise ConfigError(where, str(run_dir), f"job {job}'s data file {named} cannot "
                                  f"be read ({exc.strerror}); restore it, or {fresh}") from None
        if not now[path, was]:
            raise ConfigError(where, str(run_dir), f"job {job}'s data file {named} changed since "
                              f"the run started; restore it, or {fresh}")
