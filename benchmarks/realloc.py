"""Pause per epoch on a quickstart-sized run: from the epoch deadline until every job iterates
again, split into epochs where no job moved and epochs where some moved (checkpoint, re-split,
restore, re-read shard). Jobs stop before the deadline when their next iteration would overrun
it, so the pause is often 0; the *_gap_ms keys give the time from the moment the last job
stopped iterating until every job iterates again.

Usage: python benchmarks/realloc.py [CONFIG]   (default configs/quickstart.yaml)
Prints one JSON line last: no_move_ms, move_ms, move_fraction_of_epoch (targets: no_move_ms
<= 20, move_fraction_of_epoch <= 0.05).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import h5py
import numpy as np
import yaml

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("config", nargs="?", type=Path, default=ROOT / "configs" / "quickstart.yaml",
                    help="experiment YAML (default: configs/quickstart.yaml)")
    config = ap.parse_args().config
    with tempfile.TemporaryDirectory() as tmp:
        raw = yaml.safe_load(config.read_text())
        raw["output_dir"] = str(Path(tmp) / "run")
        cfg = Path(tmp) / "config.yaml"
        cfg.write_text(yaml.safe_dump(raw))
        proc = subprocess.run([sys.executable, "-m", "slaq_mpi", "run", str(cfg)],
                              capture_output=True, text=True)
        if proc.returncode != 0:
            sys.exit(f"run failed ({proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
        with h5py.File(Path(tmp) / "run" / "metrics.h5") as f:
            pause = f["epochs/pause_ms"][()]
            gap = f["epochs/gap_ms"][()]
            moved = f["epochs/moved"][()].astype(bool)
            epoch_s = float(f.attrs["epoch_seconds"])
    ok = ~np.isnan(pause)
    no_move = pause[ok & ~moved]
    move = pause[ok & moved]
    gap_no_move = gap[ok & ~moved]
    gap_move = gap[ok & moved]
    result = {
        "config": str(config.relative_to(ROOT) if config.is_relative_to(ROOT) else config),
        "epochs": int(len(pause)),
        "epochs_no_move": int(len(no_move)),
        "epochs_move": int(len(move)),
        "epoch_seconds": epoch_s,
        "no_move_ms": round(float(np.median(no_move)), 2) if len(no_move) else None,
        "no_move_p90_ms": round(float(np.percentile(no_move, 90)), 2) if len(no_move) else None,
        "move_ms": round(float(np.median(move)), 2) if len(move) else None,
        "move_p90_ms": round(float(np.percentile(move, 90)), 2) if len(move) else None,
        "no_move_gap_ms": round(float(np.median(gap_no_move)), 2) if len(gap_no_move) else None,
        "move_gap_ms": round(float(np.median(gap_move)), 2) if len(gap_move) else None,
        "move_fraction_of_epoch": round(float(np.median(move)) / 1000.0 / epoch_s, 4) if len(move) else None,
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
