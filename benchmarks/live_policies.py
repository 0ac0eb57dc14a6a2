"""Run the quickstart for real (slaq run, 8 ranks) once per policy on the same jobs and seed,
then compare them with `slaq report`.

Usage: python benchmarks/live_policies.py [--config FILE] [--policy NAME ...] [--out DIR]
       (default: configs/quickstart.yaml, policies slaq and fair; the runs are kept in
       DIR/<policy> with --out, else deleted)
Prints the report table, then one JSON line last: {"policies": {NAME: summary}, "config": FILE}.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default=str(ROOT / "configs" / "quickstart.yaml"))
    parser.add_argument("--policy", action="append", dest="policies")
    parser.add_argument("--out", help="keep the run directories here (DIR/<policy>)")
    args = parser.parse_args()
    policies = args.policies or ["slaq", "fair"]
    raw = yaml.safe_load(Path(args.config).read_text())
    with tempfile.TemporaryDirectory() as scratch:
        tmp = args.out or scratch
        Path(tmp).mkdir(parents=True, exist_ok=True)
        runs = []
        for name in policies:
            cfg = dict(raw, policy=name, output_dir=str(Path(tmp) / name))
            path = Path(tmp) / f"{name}.yaml"
            path.write_text(yaml.safe_dump(cfg))
            print(f"running {args.config} with policy {name} ...", file=sys.stderr, flush=True)
            proc = subprocess.run([sys.executable, "-m", "slaq_mpi", "run", str(path)],
                                  capture_output=True, text=True)
            if proc.returncode != 0:
                tail = proc.stdout[-2000:] + proc.stderr[-2000:]
                sys.exit(f"policy {name} failed ({proc.returncode}):\n{tail}")
            runs.append(str(Path(tmp) / name))
        report = subprocess.run([sys.executable, "-m", "slaq_mpi", "report", *runs, "--no-plots", "--json"],
                                capture_output=True, text=True, check=True)
        print(report.stderr, file=sys.stderr)  # the table (with --json, stdout is the JSON alone)
    result = {"policies": json.loads(report.stdout)["runs"]}
    result["config"] = str(args.config)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
