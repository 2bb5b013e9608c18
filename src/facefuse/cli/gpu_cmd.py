"""`facefuse gpu`: NVML readings (memory, utilisation, temperature, power), and `--power-limit WATTS`."""

from __future__ import annotations

import argparse
import json

from ..gpu import nvml_status, read_gpus, set_power_limit


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("gpu", help="NVIDIA GPU readings and power limit", description=__doc__)
    parser.add_argument("--power-limit", type=float, default=None, metavar="WATTS",
                        help="cap the board's power with `nvidia-smi -pl` (needs root)")
    parser.add_argument("--index", type=int, default=0, help="GPU index for --power-limit")
    parser.add_argument("--dry-run", action="store_true", help="print the nvidia-smi command, do not run it")
    parser.add_argument("--json", action="store_true", help="print machine-readable JSON")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    if args.power_limit is not None:
        command = set_power_limit(args.power_limit, args.index, dry_run=args.dry_run)
        done = "would run" if args.dry_run else "ran"
        print(json.dumps({"command": command, "dry_run": args.dry_run}) if args.json else f"{done}: {' '.join(command)}")
        return 0
    status = nvml_status()
    readings = read_gpus()
    if args.json:
        print(json.dumps({"status": status, "gpus": [r.to_dict() for r in readings]}))
    elif not readings:
        print(status if status != "ok" else "no NVIDIA GPU/NVML found")
    for r in readings if not args.json else []:
        power = f"{r.power_w:.0f}/{r.power_limit_w:.0f} W" if r.power_w is not None and r.power_limit_w else "power n/a"
        print(f"GPU {r.index} {r.name}: {r.memory_used_mb:.0f}/{r.memory_total_mb:.0f} MiB, "
              f"{r.utilisation_pct:.0f}% busy, {r.temperature_c:.0f} °C, {power}")
    return 0
