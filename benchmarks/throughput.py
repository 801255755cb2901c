"""Inference and training throughput of keras_vit against the reference implementations.

    python benchmarks/throughput.py                       # ViT-B/16, 224 px, batch 8, fp32
    python benchmarks/throughput.py --precision float32 mixed_bfloat16 --json out.json

Every (framework, backend, precision, mode) runs in its own process (`worker.py`, with
`KERAS_BACKEND` set). The processes of one mode are started one after another, compile and
warm up (not timed), and then take turns: each round every process runs `--steps` timed
steps while the others wait idle, so slow drifts in machine load hit all of them alike. The
table shows the median images/s over the rounds and the ratios of keras_vit to the
references; the JSON (printed last, or written with `--json`) has every round.

Frameworks: keras_vit and keras_hub on each Keras backend (`keras_vit/jax`, or `keras_vit`
for all three), `transformers` (PyTorch, SDPA attention), `timm` (when importable), each of
those two also as `transformers/compiled` / `timm/compiled` (`torch.compile`), and `jax_vit`
(a plain JAX ViT, jax_vit.py); `keras_vit/torch/compiled` is keras_vit on PyTorch with
`compile(jit_compile=True)`, `keras_vit/jax/float8` keras_vit with Keras' float8 training
(`model.quantize("float8")`). `--loop fit` runs the Keras models through `fit` / `predict`
(over the resident batch, repeated) instead of `train_on_batch` / `predict_on_batch`. Every framework's batch is resident on the device (the GPU
where there is one) before the timed steps. On a GPU, give `--peak-tflops` the bf16 figure of
`benchmarks/matmul.py --size 8192` to see each row's share of the card's practical peak.
"""

import argparse
import importlib.metadata
import importlib.util
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

from workload import ARCHITECTURES

HERE = os.path.dirname(os.path.abspath(__file__))
BACKENDS = ("tensorflow", "jax", "torch")
KERAS_FRAMEWORKS = ("keras_vit", "keras_hub")
TORCH_FRAMEWORKS = ("transformers", "timm", "transformers/compiled", "timm/compiled")
JAX_FRAMEWORKS = ("jax_vit",)
MODES = ("inference", "training")
PRECISIONS = ("float32", "mixed_bfloat16")
PREFIX = "@@bench"
PACKAGES = ("keras", "tensorflow-cpu", "jax", "jaxlib", "torch", "transformers", "keras-hub", "timm")


def all_frameworks():
    names = [f"{fw}/{b}" for fw in KERAS_FRAMEWORKS for b in BACKENDS] + ["transformers", "jax_vit"]
    if importlib.util.find_spec("timm") is not None:
        names.append("timm")
    return names


def resolve_frameworks(requested):
    """Expands `keras_vit` / `keras_hub` to their three backends and checks the names."""
    known = [f"{fw}/{b}" for fw in KERAS_FRAMEWORKS for b in BACKENDS] + list(TORCH_FRAMEWORKS + JAX_FRAMEWORKS)
    known += [f"{fw}/torch/compiled" for fw in KERAS_FRAMEWORKS] + [f"keras_vit/{b}/float8" for b in BACKENDS]
    names = []
    for name in requested:
        expanded = [f"{name}/{b}" for b in BACKENDS] if name in KERAS_FRAMEWORKS else [name]
        for item in expanded:
            if item not in known:
                raise SystemExit(f"Unknown framework {item!r}; expected some of {known} or {KERAS_FRAMEWORKS}.")
            if item.startswith("timm") and importlib.util.find_spec("timm") is None:
                raise SystemExit("timm is not importable here (it needs torchvision); leave it out.")
            if item not in names:
                names.append(item)
    return names


def split_framework(name):
    """`(library, backend, torch_compile)` of a framework name: "keras_vit/jax",
    "keras_vit/torch/compiled" (`compile(jit_compile=True)`), "transformers", "timm/compiled"
    (with torch.compile), "jax_vit"."""
    library, _, suffix = name.partition("/")
    if library in KERAS_FRAMEWORKS:
        backend, _, compiled = suffix.partition("/")
        return library, backend, compiled == "compiled"
    if name in JAX_FRAMEWORKS:
        return library, "jax", False
    return library, "torch", suffix == "compiled"


class Worker:
    """A `worker.py` process for one (framework, precision, mode)."""

    def __init__(self, framework, precision, mode, args):
        self.framework, self.precision, self.mode = framework, precision, mode
        library, self.backend, compiled = split_framework(framework)
        cfg = dict(
            framework=library,
            variant=args.variant,
            batch=args.batch,
            resolution=args.resolution,
            precision=precision,
            mode=mode,
            warmup=args.warmup,
            jit={"on": True, "off": False, "auto": "auto"}[args.jit],
            torch_compile=args.torch_compile == "on" or compiled,
            threads=args.threads,
            loop=getattr(args, "loop", "on_batch"),
            quantize="float8" if framework.endswith("/float8") else None,
            release_memory=getattr(args, "release_memory", False),
        )
        env = {**os.environ, "KERAS_BACKEND": self.backend, "TF_CPP_MIN_LOG_LEVEL": "3"}
        self.log = tempfile.TemporaryFile(mode="w+")
        self.proc = subprocess.Popen(
            [sys.executable, os.path.join(HERE, "worker.py"), json.dumps(cfg)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.log,
            text=True,
            env=env,
            cwd=HERE,
        )
        self.info, self.error, self.rounds, self.clock = None, None, [], args.clock

    @property
    def label(self):
        return f"{self.framework} {self.precision} {self.mode}"

    def _receive(self, kind):
        for line in self.proc.stdout:
            if line.startswith(PREFIX):
                _, got, payload = line.split(" ", 2)
                if got == kind:
                    return json.loads(payload)
        self.proc.wait()
        self.log.seek(0)
        tail = self.log.read().strip().splitlines()[-15:]
        self.error = f"exit code {self.proc.returncode}: " + "\n".join(tail)
        return None

    def wait_ready(self):
        self.info = self._receive("ready")
        return self.info is not None

    def run(self, steps, batch):
        try:
            self.proc.stdin.write(f"run {steps}\n")
            self.proc.stdin.flush()
        except BrokenPipeError:  # the worker died after it was ready: its log says why
            pass
        done = self._receive("done")
        if done is None:
            return False
        seconds = done["cpu_seconds"] if self.clock == "cpu" else done["seconds"]
        self.rounds.append(batch * done["steps"] / seconds)
        return True

    def close(self):
        if self.proc.poll() is None:
            try:
                self.proc.stdin.write("quit\n")
                self.proc.stdin.close()
            except BrokenPipeError:
                pass
            self.proc.wait(timeout=120)
        self.log.close()


def measure_mode(mode, jobs, args):
    """Measures the jobs group by group: each group's workers are started one after another,
    then take interleaved turns for `args.rounds` rounds, then end."""
    workers = []
    for group in job_groups(jobs, mode, args):
        alive = []
        for framework, precision in group:
            worker = Worker(framework, precision, mode, args)
            ok = worker.wait_ready()
            print(f"  ready: {worker.label}" + ("" if ok else f"  FAILED\n{worker.error}"), file=sys.stderr, flush=True)
            (alive if ok else workers).append(worker)
            if not ok:
                worker.close()
        _rounds(alive, args)
        for worker in alive:
            worker.close()
        workers.extend(alive)
    order = {job: i for i, job in enumerate(jobs)}
    return sorted(workers, key=lambda w: order[(w.framework, w.precision)])


def encoder_matmul_weights(variant):
    """Weights of the encoder's qkv, out and MLP kernels (the bulk of a ViT's parameters)."""
    _patch, width, depth, _heads, mlp = ARCHITECTURES[variant]
    return depth * (4 * width * width + 2 * width * mlp)


def worker_memory_gib(variant, mode):
    """A rough resident size of one worker: weights (and gradients and AdamW moments when
    training) in float32 plus the framework's own footprint."""
    params = encoder_matmul_weights(variant) + 1000 * ARCHITECTURES[variant][1]
    return params * 4 * (10 if mode == "training" else 3) / 2**30 + 1.0


def job_groups(jobs, mode, args):
    """All jobs in one interleaved group when they fit in memory together, else groups of
    at most `args.group_size` (default: what fits in the available memory) with the jobs
    of one backend together (keras_vit beside keras-hub)."""
    size = args.group_size
    if size is None:
        free = _available_memory_gib()
        size = max(1, int((free - 4.0) // worker_memory_gib(args.variant, mode))) if free else len(jobs)
    if size >= len(jobs):
        return [list(jobs)]
    by_backend = {}
    for framework, precision in jobs:
        backend = split_framework(framework)[1]
        by_backend.setdefault(backend, []).append((framework, precision))
    groups = []
    for members in by_backend.values():
        groups.extend(members[i : i + size] for i in range(0, len(members), size))
    return groups


def _available_memory_gib():
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable"):
                    return int(line.split()[1]) / 2**20
    except OSError:
        return None
    return None


def _rounds(workers, args):
    for r in range(args.rounds):
        turn = workers[r % len(workers) :] + workers[: r % len(workers)] if workers else []
        for worker in turn:
            if worker.error is not None:
                continue
            time.sleep(args.pause)  # let the previous process's spinning threads go idle
            if worker.run(args.steps, args.batch):
                print(f"  round {r + 1}: {worker.label}: {worker.rounds[-1]:.2f} img/s", file=sys.stderr, flush=True)
            else:
                print(f"  {worker.label} FAILED\n{worker.error}", file=sys.stderr, flush=True)


def machine():
    info = {"cores": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version()}
    try:
        with open("/proc/cpuinfo") as f:
            text = f.read()
        for line in text.splitlines():
            if line.startswith("model name"):
                info["cpu"] = line.split(":", 1)[1].strip()
            if line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
                info["bf16_flags"] = sorted(flags & {"avx512_bf16", "amx_bf16", "amx_tile", "avx512_fp16"})
                break
        with open("/proc/meminfo") as f:
            info["memory_gib"] = round(int(f.readline().split()[1]) / 2**20, 1)
    except OSError:
        pass
    versions = {}
    for package in PACKAGES:
        try:
            versions[package] = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            pass
    info["versions"] = versions
    return info


def summarise(results):
    """Per-row ratios and the headline ratios of the best keras_vit backend."""
    table = {}
    for r in results:
        table.setdefault((r["framework"], r["precision"]), {})[r["mode"]] = r["images_per_s"]

    def value(framework, precision, mode):
        return table.get((framework, precision), {}).get(mode)

    def ratio(a, b):
        return round(a / b, 3) if a and b else None

    rows = []
    for (framework, precision), modes in table.items():
        row = {"framework": framework, "precision": precision}
        for mode in MODES:
            mine = modes.get(mode)
            row[mode] = mine
            if framework.startswith("keras_vit/"):
                hub = "keras_hub/" + framework.split("/")[1]
                row[f"{mode}_vs_keras_hub"] = ratio(mine, value(hub, precision, mode))
                row[f"{mode}_vs_transformers"] = ratio(mine, value("transformers", precision, mode))
        rows.append(row)
    headline = {}
    for mode in MODES:
        refs = [(v, f) for (f, p), m in table.items() for v in [m.get(mode)] if v and p == "float32" and not f.startswith("keras_vit/")]
        best_ref = max(refs, default=None)
        for precision in PRECISIONS:
            mine = [(v, f) for (f, p), m in table.items() for v in [m.get(mode)] if v and p == precision and f.startswith("keras_vit/")]
            best = max(mine, default=None)
            if best and best_ref:
                headline[f"{mode}_{precision}"] = {
                    "keras_vit": best[1],
                    "images_per_s": best[0],
                    "best_fp32_reference": best_ref[1],
                    "reference_images_per_s": best_ref[0],
                    "ratio": ratio(best[0], best_ref[0]),
                }
    return rows, headline


def flops_per_image(variant, resolution, classes=1000):
    """Forward FLOPs (2 per multiply-add) of one image: patch embedding, every block's
    qkv / out / MLP matmuls and attention products, and the head. Training is 3x."""
    patch, width, depth, _heads, _mlp = ARCHITECTURES[variant]
    patches = (resolution // patch) ** 2
    tokens = patches + 1
    attention = depth * 2 * 2 * tokens * tokens * width
    matmuls = 2 * tokens * encoder_matmul_weights(variant)
    return 2 * patches * patch * patch * 3 * width + matmuls + attention + 2 * width * classes


def print_utilisation(rows, args):
    """Model TFLOP/s of every row and, with `--peak-tflops`, the share of the device's peak."""
    forward = flops_per_image(args.variant, args.resolution)
    print()
    for row in rows:
        for mode, factor in (("inference", 1), ("training", 3)):
            if row.get(mode):
                tflops = row[mode] * forward * factor / 1e12
                share = f" = {100 * tflops / args.peak_tflops:.0f}% of {args.peak_tflops:g}" if args.peak_tflops else ""
                print(f"{row['framework']} {row['precision']} {mode}: {tflops:.3f} TFLOP/s{share}")


def print_ratios(rows):
    """Each keras_vit row over each reference row of the same precision, per mode."""
    refs = [r for r in rows if not r["framework"].startswith(KERAS_FRAMEWORKS)]
    for row in rows:
        if not row["framework"].startswith("keras_vit/"):
            continue
        for mode in MODES:
            cells = [f"{ref['framework']} {row[mode] / ref[mode]:.2f}x" for ref in refs
                     if ref["precision"] == row["precision"] and row.get(mode) and ref.get(mode)]
            if cells:
                print(f"{row['framework']} {row['precision']} {mode}: " + ", ".join(cells))


def _fmt(x, spec=".2f"):
    return "-" if x is None else format(x, spec)


def print_table(rows, headline, args):
    print(f"\n{args.variant} at {args.resolution} px, batch {args.batch}, {args.steps} steps x {args.rounds} rounds"
          f" (median images/s, {args.clock} clock, {args.threads or 'all'} threads), jit {args.jit}, torch.compile {args.torch_compile}\n")
    head = ["framework", "precision", "inference img/s", "training img/s",
            "inf vs keras-hub", "train vs keras-hub", "inf vs transformers", "train vs transformers"]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for row in rows:
        cells = [row["framework"], row["precision"], _fmt(row.get("inference")), _fmt(row.get("training")),
                 _fmt(row.get("inference_vs_keras_hub")), _fmt(row.get("training_vs_keras_hub")),
                 _fmt(row.get("inference_vs_transformers")), _fmt(row.get("training_vs_transformers"))]
        print("| " + " | ".join(cells) + " |")
    if headline:
        print()
    for key, h in headline.items():
        print(f"best keras_vit {key.replace('_', ' ', 1)}: {h['keras_vit']} {h['images_per_s']:.2f} img/s = "
              f"{h['ratio']:.2f}x the best fp32 reference ({h['best_fp32_reference']} {h['reference_images_per_s']:.2f})")


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--variant", default="ViTB16", choices=list(ARCHITECTURES))
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--peak-tflops", type=float, default=None,
                        help="the device's peak TFLOP/s at the measured precision (e.g. 989 for an "
                             "H100 SXM in dense bf16): prints each row's share of it")
    parser.add_argument("--resolution", type=int, default=224)
    parser.add_argument("--precision", nargs="+", default=["float32"], choices=PRECISIONS)
    parser.add_argument("--modes", nargs="+", default=list(MODES), choices=MODES)
    parser.add_argument("--frameworks", nargs="+", default=None,
                        help="default: keras_vit and keras_hub on every backend, transformers, timm if importable")
    parser.add_argument("--steps", type=int, default=1, help="timed steps per round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=2, help="untimed steps (compilation included)")
    parser.add_argument("--jit", choices=("auto", "on", "off"), default="auto",
                        help="XLA on TensorFlow and JAX; auto: Keras' own choice (XLA on JAX, and on "
                             "TensorFlow unless the machine has only CPUs)")
    parser.add_argument("--torch-compile", choices=("on", "off"), default="off",
                        help="torch.compile for PyTorch models (keras: compile(jit_compile=True))")
    parser.add_argument("--group-size", type=int, default=None,
                        help="processes alive and interleaved at a time; those of one backend go "
                             "together (default: as many as fit in the available memory)")
    parser.add_argument("--threads", type=int, default=None,
                        help="pin each process to this many cores (default: all)")
    parser.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                        help="cpu: images per second of process CPU time, a load-insensitive measure "
                             "of the work done, meaningful with --threads 1 (a development aid)")
    parser.add_argument("--loop", choices=("on_batch", "fit"), default="on_batch",
                        help="Keras models: train_on_batch / predict_on_batch, or fit / predict")
    parser.add_argument("--pause", type=float, default=0.3, help="seconds between turns")
    parser.add_argument("--json", help="also write the JSON report to this file")
    args = parser.parse_args(argv)
    if args.batch < 1 or args.steps < 1 or args.rounds < 1 or args.warmup < 0:
        parser.error("--batch, --steps and --rounds must be positive, --warmup >= 0")
    return args


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    frameworks = resolve_frameworks(args.frameworks or all_frameworks())
    jobs = [(f, p) for p in args.precision for f in frameworks]
    report = {"command": " ".join([os.path.basename(sys.executable), *sys.argv]), "machine": machine(),
              "settings": {k: v for k, v in vars(args).items() if k != "json"},
              "load_before": os.getloadavg(), "started": time.strftime("%Y-%m-%d %H:%M:%S"), "results": []}
    for mode in args.modes:
        print(f"== {mode}: {len(jobs)} processes (load {os.getloadavg()[0]:.2f})", file=sys.stderr, flush=True)
        for w in measure_mode(mode, jobs, args):
            report["results"].append({
                "framework": w.framework, "precision": w.precision, "mode": mode,
                "images_per_s": statistics.median(w.rounds) if w.rounds else None,
                "best_images_per_s": max(w.rounds, default=None),
                "rounds": [round(x, 3) for x in w.rounds], "setup": w.info, "error": w.error,
            })
    report["load_after"] = os.getloadavg()
    rows, headline = summarise(report["results"])
    report["table"], report["headline"] = rows, headline
    print_table(rows, headline, args)
    print_utilisation(rows, args)
    print()
    print_ratios(rows)
    print(f"\nload average before {report['load_before'][0]:.2f}, after {report['load_after'][0]:.2f}")
    text = json.dumps(report, indent=1)
    if args.json:
        tmp = args.json + ".tmp"
        with open(tmp, "w") as f:
            f.write(text + "\n")
        os.replace(tmp, args.json)
    else:
        print("\n" + text)


if __name__ == "__main__":
    main()
