"""Every target of issue 33 in one device call: `bash benchmarks/gpu.sh targets`.

    python benchmarks/targets.py --json out/targets.json      # one GPU: B/16 and L/16, bf16, ~7 minutes
    python benchmarks/targets.py --quick --frameworks keras_vit/jax --errors jax   # a tiny CPU run

Each row (`ROWS`) is one `throughput.py` worker (`worker.py`: its own process, the batch
resident on the device, AdamW, exact GELU everywhere, Keras models through `fit` / `predict`).
The rows run in waves: the workers of a wave start together, so that their compilations share
the host's cores (idle PyTorch workers give their cached GPU memory back), then take turns for
`--rounds` rounds of `--steps` steps. Warm-ups overlap within a wave: compare a warm-up with
the others of its wave only. Every row has its own time limit to be ready (the worker is
killed past it, or past `TURN_LIMIT` in a timed turn, and the row reported as such), cut to
what is left of `--budget`. Beside the first wave,
`bf16_error.py` runs on each of `--errors` (float32 against float64, mixed_bfloat16 against
transformers under autocast). The JSON (`--json`) is rewritten after every wave; the ratios
against the issue's targets are printed last.
"""

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import threading
import time
from types import SimpleNamespace

from throughput import HERE, Worker, machine

# (framework, variant, batch, mode, seconds): the waves in the order they run
ROWS = (
    (
        ("keras_vit/jax", "ViTB16", 256, "training", 180),
        ("keras_vit/jax", "ViTB16", 256, "inference", 120),
        ("keras_hub/jax", "ViTB16", 256, "training", 180),
        ("keras_hub/jax", "ViTB16", 256, "inference", 120),
    ),
    (
        ("keras_vit/jax/float8", "ViTB16", 256, "training", 180),
        ("keras_vit/jax", "ViTL16", 128, "training", 180),
    ),
    (
        ("keras_vit/torch/compiled", "ViTB16", 256, "training", 300),
        ("keras_vit/torch/compiled", "ViTB16", 256, "inference", 180),
        ("keras_vit/torch", "ViTB16", 256, "training", 120),
        ("transformers", "ViTB16", 256, "training", 120),
        ("timm/compiled", "ViTB16", 256, "training", 200),
        ("timm/compiled", "ViTB16", 256, "inference", 150),
        ("keras_vit/torch/compiled", "ViTL16", 128, "training", 330),
        ("timm/compiled", "ViTL16", 128, "training", 200),
    ),
)
QUICK = dict(variant="ViTTi16", batch=2, resolution=32, precision="float32")
# (what, keras_vit row, reference row, goal): rows are (framework, variant, mode)
SPEED_TARGETS = (
    ("B/16 training, JAX fit / timm compiled", ("keras_vit/jax", "ViTB16", "training"), ("timm/compiled", "ViTB16", "training"), 1.0),
    ("B/16 inference, JAX predict / timm compiled", ("keras_vit/jax", "ViTB16", "inference"), ("timm/compiled", "ViTB16", "inference"), 1.0),
    ("B/16 training, JAX / keras-hub JAX", ("keras_vit/jax", "ViTB16", "training"), ("keras_hub/jax", "ViTB16", "training"), 1.0),
    ("B/16 inference, JAX / keras-hub JAX", ("keras_vit/jax", "ViTB16", "inference"), ("keras_hub/jax", "ViTB16", "inference"), 1.0),
    ("B/16 training, PyTorch jit_compile / timm compiled", ("keras_vit/torch/compiled", "ViTB16", "training"), ("timm/compiled", "ViTB16", "training"), 1.1),
    ("B/16 inference, PyTorch jit_compile / timm compiled", ("keras_vit/torch/compiled", "ViTB16", "inference"), ("timm/compiled", "ViTB16", "inference"), 1.1),
    ("B/16 training, PyTorch eager / transformers eager", ("keras_vit/torch", "ViTB16", "training"), ("transformers", "ViTB16", "training"), 1.0),
    ("L/16 training, JAX fit / timm compiled", ("keras_vit/jax", "ViTL16", "training"), ("timm/compiled", "ViTL16", "training"), 1.0),
    ("L/16 training, PyTorch jit_compile / timm compiled", ("keras_vit/torch/compiled", "ViTL16", "training"), ("timm/compiled", "ViTL16", "training"), 1.1),
    ("B/16 training, JAX float8 / bf16", ("keras_vit/jax/float8", "ViTB16", "training"), ("keras_vit/jax", "ViTB16", "training"), 1.3),
)
WARMUP_TARGETS = (  # at most this many times the reference's warm-up
    ("B/16 training warm-up, PyTorch jit_compile / timm compiled", ("keras_vit/torch/compiled", "ViTB16", "training"), ("timm/compiled", "ViTB16", "training"), 1.5),
    ("L/16 training warm-up, PyTorch jit_compile / timm compiled", ("keras_vit/torch/compiled", "ViTL16", "training"), ("timm/compiled", "ViTL16", "training"), 1.5),
)
TURN_LIMIT = 120
ERROR_LINES = {"float32": "keras_vit float32", "mixed_bfloat16": "keras_vit mixed_bfloat16", "autocast": "transformers autocast bf16"}


class Row:
    """One worker of a wave, killed when it is not ready within its time limit or a timed turn
    takes longer than `TURN_LIMIT` seconds."""

    def __init__(self, spec, args, limit):
        self.framework, self.variant, self.batch, self.mode, _ = spec
        settings = SimpleNamespace(
            variant=self.variant, batch=self.batch, resolution=args.resolution, warmup=args.warmup, jit="auto",
            torch_compile="off", threads=None, clock="wall", loop="fit", release_memory=True,
        )
        self.limit = limit
        self.worker = Worker(self.framework, args.precision, self.mode, settings)
        self.timer = threading.Timer(limit, self.worker.proc.kill)
        self.timer.start()

    def ready(self):
        ok = self.worker.wait_ready()
        self.timer.cancel()
        return ok

    def turn(self, steps):
        timer = threading.Timer(TURN_LIMIT, self.worker.proc.kill)
        timer.start()
        self.worker.run(steps, self.batch)
        timer.cancel()

    def result(self):
        worker = self.worker
        error = worker.error
        if error is not None and worker.proc.returncode == -9:
            error = f"killed at its time limit ({self.limit:.0f} s to be ready, {TURN_LIMIT} s a turn)"
        return {
            "framework": self.framework, "variant": self.variant, "batch": self.batch, "mode": self.mode,
            "images_per_s": statistics.median(worker.rounds) if worker.rounds else None,
            "rounds": [round(x, 2) for x in worker.rounds], "setup": worker.info, "error": error,
        }

    def close(self):
        self.timer.cancel()
        self.worker.close()


def start_errors(args):
    """bf16_error.py on each backend of `--errors`, in the background."""
    procs = {}
    for backend in args.errors:
        command = [sys.executable, os.path.join(HERE, "bf16_error.py"), "--variant", args.error_variant,
                   "--resolution", str(args.resolution), "--images", str(args.error_images), "--torch-autocast"]
        env = {**os.environ, "KERAS_BACKEND": backend, "TF_CPP_MIN_LOG_LEVEL": "3"}
        procs[backend] = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    return procs


def collect_errors(procs, timeout):
    """backend -> {"float32": ..., "mixed_bfloat16": ..., "autocast": ...} or {"error": ...}."""
    errors = {}
    for backend, proc in procs.items():
        try:
            out, _ = proc.communicate(timeout=max(1.0, timeout))
        except subprocess.TimeoutExpired:
            proc.kill()
            errors[backend] = {"error": "killed at its time limit"}
            continue
        found = {key: float(m[1]) for key, line in ERROR_LINES.items()
                 for m in [re.search(rf"^\s*{re.escape(line)}:\s*([0-9.eE+-]+)", out, flags=re.M)] if m}
        errors[backend] = found if proc.returncode == 0 else {"error": out.strip().splitlines()[-1:]}
    return errors


def run_wave(specs, args, deadline, errors=None):
    left = deadline - time.monotonic()
    rows = [Row(spec, args, min(spec[4], left)) for spec in specs]  # all start now
    alive = []
    for row in rows:
        ok = row.ready()
        print(f"  ready: {row.framework} {row.variant} {row.mode}"
              + (f" (warm-up {row.worker.info['warmup_s']:.1f} s)" if ok else f" FAILED: {row.result()['error'][-300:]}"),
              file=sys.stderr, flush=True)
        if ok:
            alive.append(row)
    measured = collect_errors(errors, deadline - time.monotonic()) if errors else {}
    for r in range(args.rounds):
        for row in alive[r % len(alive):] + alive[: r % len(alive)] if alive else []:
            if row.worker.error is None and time.monotonic() < deadline:
                row.turn(args.steps)
    for row in rows:
        row.close()
    return [row.result() for row in rows], measured


def _value(results, key, field):
    for r in results:
        if (r["framework"], r["variant"], r["mode"]) == key and r["images_per_s"]:
            return r["images_per_s"] if field == "images_per_s" else r["setup"][field]
    return None


def ratio_table(results, errors):
    lines = ["| target | keras_vit | reference | ratio | goal | met |", "|---|---|---|---|---|---|"]
    for kind, targets, field, unit in (("speed", SPEED_TARGETS, "images_per_s", "img/s"),
                                       ("warm-up", WARMUP_TARGETS, "warmup_s", "s")):
        for what, mine, reference, goal in targets:
            a, b = _value(results, mine, field), _value(results, reference, field)
            ratio = a / b if a and b else None
            met = "-" if ratio is None else ("yes" if (ratio >= goal if kind == "speed" else ratio <= goal) else "no")
            sign = ">=" if kind == "speed" else "<="
            cells = ["-" if v is None else f"{v:,.1f} {unit}" for v in (a, b)]
            lines.append(f"| {what} | {cells[0]} | {cells[1]} | {'-' if ratio is None else f'{ratio:.2f}x'} | "
                         f"{sign} {goal} | {met} |")
    for backend, found in errors.items():
        f32, bf16, autocast = (found.get(k) for k in ("float32", "mixed_bfloat16", "autocast"))
        lines.append(f"| float32 vs float64, {backend} | {'-' if f32 is None else f'{f32:.2e}'} | | | <= 1e-05 | "
                     f"{'-' if f32 is None else ('yes' if f32 <= 1e-5 else 'no')} |")
        ratio = bf16 / autocast if bf16 and autocast else None
        lines.append(f"| bf16 error / autocast's, {backend} | {'-' if bf16 is None else f'{bf16:.2e}'} | "
                     f"{'-' if autocast is None else f'{autocast:.2e}'} | {'-' if ratio is None else f'{ratio:.2f}x'} | "
                     f"<= 1.0 | {'-' if ratio is None else ('yes' if ratio <= 1.0 else 'no')} |")
    return "\n".join(lines)


def write(report, path):
    if path:
        with open(path + ".tmp", "w") as f:
            json.dump(report, f, indent=1)
        os.replace(path + ".tmp", path)


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--budget", type=float, default=440, help="seconds for the whole run (rows cut to fit)")
    parser.add_argument("--steps", type=int, default=5, help="timed steps per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=3, help="untimed steps (compilation included)")
    parser.add_argument("--frameworks", nargs="+", default=None, help="only the rows of these frameworks")
    parser.add_argument("--variants", nargs="+", default=None, choices=("ViTB16", "ViTL16"), help="only the rows of these variants")
    parser.add_argument("--errors", nargs="*", default=["jax", "torch"], choices=("jax", "torch"),
                        help="backends whose float32 / bf16 error is measured (none: no error rows)")
    parser.add_argument("--error-images", type=int, default=16)
    parser.add_argument("--quick", action="store_true", help="a tiny float32 run (ViTTi16, 32 px, batch 2): the tests")
    parser.add_argument("--json", help="write the rows and errors here (after every wave)")
    args = parser.parse_args(argv)
    for flag in ("budget", "steps", "rounds", "error_images"):
        if getattr(args, flag) <= 0:
            parser.error(f"--{flag.replace('_', '-')} must be positive")
    if args.warmup < 1:
        parser.error("--warmup must be >= 1")
    known = {spec[0] for wave in ROWS for spec in wave}
    unknown = sorted(set(args.frameworks or ()) - known)
    if unknown:
        parser.error(f"unknown framework(s) {', '.join(unknown)}; the rows have {', '.join(sorted(known))}")
    args.precision, args.resolution, args.error_variant = "mixed_bfloat16", 224, "ViTB16"
    if args.quick:
        args.precision, args.resolution, args.error_variant = QUICK["precision"], QUICK["resolution"], QUICK["variant"]
    return args


def waves(args):
    """The waves' rows of `--frameworks`; with `--quick` tiny (B/16 and L/16 rows are one)."""
    seen = set()
    for wave in ROWS:
        specs = [s for s in wave if (args.frameworks is None or s[0] in args.frameworks)
                 and (args.variants is None or s[1] in args.variants)]
        if args.quick:  # the budget is every row's limit: the GPU's limits do not fit a CPU
            specs = [(f, QUICK["variant"], QUICK["batch"], mode, args.budget) for f, _, _, mode, _ in specs]
        specs = [s for s in specs if s[:4] not in seen and not seen.add(s[:4])]
        if specs:
            yield specs


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    deadline = time.monotonic() + args.budget
    report = {"command": " ".join([os.path.basename(sys.executable), *sys.argv]), "machine": machine(),
              "settings": vars(args), "started": time.strftime("%Y-%m-%d %H:%M:%S"), "results": [], "errors": {}}
    errors = start_errors(args) if args.errors else None
    for index, specs in enumerate(waves(args)):
        if time.monotonic() >= deadline:
            report["results"] += [dict(zip(("framework", "variant", "batch", "mode"), s), error="not started: budget spent")
                                  for s in specs]
            continue
        print(f"== wave {index + 1}: {len(specs)} rows, {deadline - time.monotonic():.0f} s left", file=sys.stderr, flush=True)
        results, measured = run_wave(specs, args, deadline, errors if index == 0 else None)
        report["results"] += results
        report["errors"].update(measured)
        write(report, args.json)
    if errors and not report["errors"]:  # no wave ran
        report["errors"] = collect_errors(errors, deadline - time.monotonic())
    write(report, args.json)
    print("\n| framework | variant | mode | img/s | warm-up s | error |\n|---|---|---|---|---|---|")
    for r in report["results"]:
        speed = "-" if not r.get("images_per_s") else f"{r['images_per_s']:,.1f}"
        warm = "-" if not r.get("setup") else f"{r['setup']['warmup_s']:.1f}"
        print(f"| {r['framework']} | {r['variant']} | {r['mode']} | {speed} | {warm} | {(r.get('error') or '')[-120:]} |")
    print("\n" + ratio_table(report["results"], report["errors"]))


if __name__ == "__main__":
    main()
