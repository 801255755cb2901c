"""Where a keras_vit step's time goes on the PyTorch backend (`torch.profiler`).

    KERAS_BACKEND=torch python benchmarks/torch_profile.py            # ViT-B/16, 224 px, batch 8
    KERAS_BACKEND=torch python benchmarks/torch_profile.py --quick    # tiny 12-block model, 1 thread

For each precision and mode the script builds the model of `throughput.py` (`frameworks.py`:
1000-class head, exact GELU, AdamW, the batch resident on the device), runs `--warmup`
untimed steps of `predict_on_batch` / `train_on_batch`, times `--steps` more (median wall
and process CPU ms per step; on one thread the CPU time is the figure that other processes
on the machine disturb least), then profiles one step and splits its wall time:

- python: host time outside every torch op: Keras' `Layer.__call__` bookkeeping, the
  trainer, the model's own Python (the counts of `Layer.__call__` and `_setattr_hook` calls
  per step are shown beside it);
- casts: `aten::to` / `_to_copy` / `copy_` / `clone` / `contiguous` (dtype casts and copies);
- optimizer: everything inside Keras' `optimizer.apply` (its Python included);
- attention: the `scaled_dot_product_attention` ops (the kernels it picked are listed);
- matmul: `mm` / `addmm` / `bmm` / `matmul` / `linear`; other: every other op.

On a CUDA GPU each category also gets the device (kernel) time of its ops. `--quick` is the
overhead-bound case: a 12-block model of width 32 on 16 px images, one thread.
"""

import argparse
import os
import statistics
import sys
import time

QUICK = dict(variant="tiny", architecture=(4, 32, 12, 2, 64), resolution=16, threads=1)
CASTS = ("aten::to", "aten::_to_copy", "aten::copy_", "aten::clone", "aten::contiguous")
MATMULS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::matmul", "aten::linear", "aten::baddbmm")
CATEGORIES = ("python", "casts", "optimizer", "attention", "matmul", "other")
OPTIMIZER_RANGE = "keras_vit::optimizer.apply"


def category(event):
    """The category of an op's own time (see the module docstring)."""
    name = event.name
    parent = event
    while parent is not None:
        if parent.name == OPTIMIZER_RANGE:
            return "optimizer"
        parent = parent.cpu_parent
    if "scaled_dot_product" in name or "attention" in name:
        return "attention"
    if name in MATMULS:
        return "matmul"
    if name in CASTS:
        return "casts"
    return "other"


def breakdown(events, wall_ms):
    """`{category: (host ms, device ms)}` of one profiled step, and the attention ops seen."""
    host = dict.fromkeys(CATEGORIES, 0.0)
    device = dict.fromkeys(CATEGORIES, 0.0)
    attention = set()
    for event in events:
        if event.device_type.name != "CPU":
            continue
        kind = category(event)
        host[kind] += event.self_cpu_time_total / 1e3
        device[kind] += getattr(event, "self_device_time_total", 0.0) / 1e3
        if kind == "attention" and event.name.startswith("aten::"):
            attention.add(event.name)
    host["python"] = max(wall_ms - sum(host.values()), 0.0)
    return {k: (host[k], device[k]) for k in CATEGORIES}, sorted(attention)


class CallCounter:
    """Counts calls of some class methods while active (`with counter: ...`)."""

    def __init__(self, methods):
        self.methods, self.counts, self._saved = methods, {}, []

    def __enter__(self):
        for cls, name in self.methods:
            original = getattr(cls, name)
            label = f"{name}"

            def counted(*args, _original=original, _label=label, **kwargs):
                self.counts[_label] = self.counts.get(_label, 0) + 1
                return _original(*args, **kwargs)

            self._saved.append((cls, name, original))
            setattr(cls, name, counted)
        return self

    def __exit__(self, *exc):
        for cls, name, original in reversed(self._saved):
            setattr(cls, name, original)
        self._saved.clear()


def profile_case(cfg, args):
    """Times and profiles `predict_on_batch` or `train_on_batch` for one (precision, mode)."""
    import keras
    import torch
    from keras.src.backend.torch.layer import TorchLayer
    from torch.profiler import ProfilerActivity, profile, record_function

    from frameworks import make_runner

    runner = make_runner(cfg)
    step = runner.infer if cfg["mode"] == "inference" else runner.train
    optimizer = runner.model.optimizer
    apply = optimizer.apply

    def traced_apply(*a, **k):
        with record_function(OPTIMIZER_RANGE):
            return apply(*a, **k)

    optimizer.apply = traced_apply
    for _ in range(args.warmup):
        step()
    times, cpu_times = [], []
    for _ in range(args.steps):
        start, start_cpu = time.perf_counter(), time.process_time()
        step()
        times.append((time.perf_counter() - start) * 1e3)
        cpu_times.append((time.process_time() - start_cpu) * 1e3)
    with CallCounter([(keras.layers.Layer, "__call__"), (TorchLayer, "_setattr_hook")]) as counter:
        step()
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
    with profile(activities=activities) as prof:
        start = time.perf_counter()
        step()
        wall = (time.perf_counter() - start) * 1e3
    if args.trace:
        os.makedirs(args.trace, exist_ok=True)
        prof.export_chrome_trace(os.path.join(args.trace, f"{cfg['variant']}_{cfg['precision']}_{cfg['mode']}.json"))
    casts = sum(1 for e in prof.events() if e.name == "aten::_to_copy" and category(e) != "optimizer")
    parts, attention = breakdown(prof.events(), wall)
    return dict(
        ms=statistics.median(times), cpu_ms=statistics.median(cpu_times), profiled_ms=wall, parts=parts, attention=attention,
        layer_calls=counter.counts.get("__call__", 0), setattr_calls=counter.counts.get("_setattr_hook", 0),
        to_copies=casts,
    )


def print_table(rows, on_device):
    heads = ["precision", "mode", "ms/step", "CPU ms/step", "profiled ms"] + [f"{c} ms" for c in CATEGORIES]
    heads += ["Layer.__call__", "_setattr_hook", "_to_copy (model)", "attention ops"]
    print("| " + " | ".join(heads) + " |")
    print("|" + "---|" * len(heads))
    for (precision, mode), r in rows:
        cells = [precision, mode, f"{r['ms']:.1f}", f"{r['cpu_ms']:.1f}", f"{r['profiled_ms']:.1f}"]
        for c in CATEGORIES:
            host, device = r["parts"][c]
            share = 100 * host / r["profiled_ms"]
            cells.append(f"{host:.1f} ({share:.0f}%)" + (f" / dev {device:.1f}" if on_device else ""))
        cells += [str(r["layer_calls"]), str(r["setattr_calls"]), str(r["to_copies"]), ", ".join(r["attention"])]
        print("| " + " | ".join(cells) + " |")


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="the tiny 12-block model on one thread")
    parser.add_argument("--variant", default="ViTB16", help="a builder name of frameworks.ARCHITECTURES")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--resolution", type=int, default=None, help="default 224, 16 with --quick")
    parser.add_argument("--precision", nargs="+", default=None, choices=("float32", "mixed_bfloat16"),
                        help="default both, float32 with --quick")
    parser.add_argument("--modes", nargs="+", default=["inference", "training"], choices=("inference", "training"))
    parser.add_argument("--steps", type=int, default=None, help="timed steps (default 3, 20 with --quick)")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default all, 1 with --quick)")
    parser.add_argument("--trace", metavar="DIR", help="also write each profiled step as a Chrome trace here")
    args = parser.parse_args(argv)
    if args.batch < 1 or (args.steps is not None and args.steps < 1) or args.warmup < 0:
        parser.error("--batch and --steps must be >= 1, --warmup >= 0")
    return args


def main(argv=None):
    args = parse_args(argv)
    backend = os.environ.setdefault("KERAS_BACKEND", "torch")
    if backend != "torch":
        print(f"torch_profile.py profiles the PyTorch backend; got KERAS_BACKEND={backend!r} (use torch).",
              file=sys.stderr)
        return 2
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from workload import ARCHITECTURES

    base = dict(QUICK) if args.quick else dict(variant=args.variant, resolution=224, threads=args.threads)
    if not args.quick and args.variant not in ARCHITECTURES:
        print(f"Unknown --variant {args.variant!r}; expected one of {sorted(ARCHITECTURES)}.", file=sys.stderr)
        return 2
    base["resolution"] = args.resolution or base["resolution"]
    base["threads"] = args.threads or base["threads"]
    args.steps = args.steps or (20 if args.quick else 3)
    precisions = args.precision or (["float32"] if args.quick else ["float32", "mixed_bfloat16"])
    import torch

    if base["threads"]:
        torch.set_num_threads(base["threads"])
    rows = []
    for precision in precisions:
        for mode in args.modes:
            cfg = dict(base, framework="keras_vit", batch=args.batch, precision=precision, mode=mode,
                       jit=False, torch_compile=False)
            rows.append(((precision, mode), profile_case(cfg, args)))
    import keras

    print(f"keras_vit {base['variant']} {base['resolution']} px, batch {args.batch}, torch {torch.__version__}, "
          f"keras {keras.__version__}, {torch.get_num_threads()} threads, "
          f"{'CUDA ' + torch.cuda.get_device_name() if torch.cuda.is_available() else 'CPU'}, "
          f"load average {os.getloadavg()[0]:.1f}; ms/step and process CPU ms/step: median of {args.steps} "
          f"steps; the rest: one profiled step")
    print_table(rows, torch.cuda.is_available())
    return 0


if __name__ == "__main__":
    sys.exit(main())
