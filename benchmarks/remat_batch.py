"""The largest batch that trains, with and without rematerialisation (`remat=True`).

    KERAS_BACKEND=jax python benchmarks/remat_batch.py --variant ViTL16 --precision mixed_bfloat16
    KERAS_BACKEND=jax python benchmarks/remat_batch.py --variant ViTTi16 --resolution 32 --max-batch 8   # CPU check

Each probe is its own process (an out-of-memory error can leave a backend unusable): it builds
keras_vit's model as `throughput.py` does (AdamW, `train_on_batch` on a batch resident on the
device) and takes two training steps. The batch doubles from `--start` until a step runs out of
memory or `--max-batch` is reached, then bisects down to `--granularity`. Prints the largest
batch of each setting and its images/s (the second step's).

On a GPU, XLA rematerialises by itself when a program would exceed the device's memory (seen on
an H100: L/16 trained at batch 4,096 without `remat=True`), so there the search without remat
measures XLA's choice; compare the images/s of the two settings at one batch as well.
"""

import argparse
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
OUT_OF_MEMORY = 3
OOM_MARKERS = ("RESOURCE_EXHAUSTED", "out of memory", "OutOfMemory", "OOM")


def probe(cfg):
    """Child process: two training steps at `cfg["batch"]`; exit code OUT_OF_MEMORY on OOM."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    from frameworks import make_runner

    try:
        runner = make_runner(cfg)
        runner.train()
        start = time.perf_counter()
        runner.train()
        seconds = time.perf_counter() - start
    except Exception as error:  # the backends raise different types for OOM
        if any(marker in str(error) for marker in OOM_MARKERS):
            sys.exit(OUT_OF_MEMORY)
        raise
    print(json.dumps({"images_per_s": cfg["batch"] / seconds}))


def trains(batch, remat, args):
    """(True, images/s) if `batch` trains, (False, None) if it runs out of memory."""
    cfg = dict(framework="keras_vit", variant=args.variant, resolution=args.resolution, batch=batch,
               precision=args.precision, mode="training", jit="auto", torch_compile=False, remat=remat)
    run = subprocess.run([sys.executable, __file__, "--probe", json.dumps(cfg)], cwd=HERE,
                         capture_output=True, text=True, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
    if run.returncode == OUT_OF_MEMORY:
        return False, None
    if run.returncode:
        raise SystemExit(f"probe at batch {batch} (remat={remat}) failed:\n{run.stderr[-3000:]}")
    return True, json.loads(run.stdout.strip().splitlines()[-1])["images_per_s"]


def largest_batch(remat, args):
    """(largest batch that trains, its images/s, whether --max-batch capped the search)."""
    good, speed, bad = None, None, None
    batch = args.start
    while batch <= args.max_batch:
        ok, rate = trains(batch, remat, args)
        print(f"  remat={remat} batch {batch}: {'ok' if ok else 'out of memory'}", file=sys.stderr, flush=True)
        if not ok:
            bad = batch
            break
        good, speed = batch, rate
        batch *= 2
    if good is None:
        return None, None, False
    while bad is not None and bad - good > args.granularity:
        middle = (good + bad) // 2 // args.granularity * args.granularity
        if middle <= good:
            break
        ok, rate = trains(middle, remat, args)
        print(f"  remat={remat} batch {middle}: {'ok' if ok else 'out of memory'}", file=sys.stderr, flush=True)
        good, speed, bad = (middle, rate, bad) if ok else (good, speed, middle)
    return good, speed, bad is None


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--variant", default="ViTL16")
    parser.add_argument("--resolution", type=int, default=224)
    parser.add_argument("--precision", default="mixed_bfloat16", choices=("float32", "mixed_bfloat16"))
    parser.add_argument("--start", type=int, default=32, help="first batch tried")
    parser.add_argument("--max-batch", type=int, default=8192, help="stop doubling here")
    parser.add_argument("--granularity", type=int, default=8, help="bisect down to this many images")
    parser.add_argument("--remat", nargs="+", default=["off", "on"], choices=("off", "on"))
    parser.add_argument("--probe", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.probe:
        return probe(json.loads(args.probe))
    if min(args.start, args.max_batch, args.granularity) < 1:
        parser.error("--start, --max-batch and --granularity must be positive")
    backend = os.environ.get("KERAS_BACKEND", "tensorflow")
    print(f"\n{args.variant} at {args.resolution} px, {args.precision}, KERAS_BACKEND={backend}, AdamW\n")
    print("| remat | largest batch | img/s at that batch |\n|---|---|---|")
    for remat in (setting == "on" for setting in args.remat):
        batch, speed, capped = largest_batch(remat, args)
        shown = "none" if batch is None else f"{batch}{' (--max-batch)' if capped else ''}"
        print(f"| {'on' if remat else 'off'} | {shown} | {'-' if speed is None else f'{speed:.1f}'} |", flush=True)


if __name__ == "__main__":
    main()
