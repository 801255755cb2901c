"""Where keras_vit's time goes on the JAX backend: its bare jitted forward / train step against
the plain JAX ViT (jax_vit.py), variant by variant, in one process on one device.

    KERAS_BACKEND=jax python benchmarks/jax_gpu_profile.py --variant ViTB16 --batch 256

Each case is one `jax.jit` function on a batch already on the device (no Keras loop: the
loop's own cost is `step_overhead.py`'s subject). The cases are compiled first, then take turns
for `--rounds` rounds of `--steps` steps (`step_overhead.measure`, after a warm-up round); the
table gives the median img/s and the ratio to the plain JAX ViT. keras_vit's model is
`throughput.py`'s (`frameworks.KerasViTRunner`); its variants, each built and compiled while its
change is in place:

- `shipped`: as the library runs it (exact GELU as timm, float32 residual stream);
- `padded cuDNN attention`: inference through the padded cuDNN flash kernel that training uses;
- `tanh GELU`: `approximate_gelu=True`;
- `bf16 stream`: the residual stream in the compute dtype instead of float32;
- `Pallas dense+GELU`: each MLP's first matmul, bias and exact GELU in one Pallas kernel
  (`pallas_gelu.py`; Pallas' interpreter off the GPU).

Also printed: Keras' own flash-attention verdict for these q/k/v shapes (which decides whether
`ops.dot_product_attention` uses cuDNN at inference) and, per compiled program, its cuDNN /
cuBLAS custom calls, fusions, copies and transposes.
"""

import argparse
import collections
import contextlib
import os
import re
import sys

os.environ.setdefault("KERAS_BACKEND", "jax")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jax  # noqa: E402
import keras  # noqa: E402
import numpy as np  # noqa: E402

import jax_vit  # noqa: E402
import pallas_gelu  # noqa: E402
from keras_vit.layers import attention, fused_attention, mlp, residual  # noqa: E402
from keras_vit.layers.sublayer import run  # noqa: E402
from step_overhead import bare_predict_step, bare_train_step, hlo_ops, measure  # noqa: E402
from frameworks import KerasViTRunner  # noqa: E402
from workload import ARCHITECTURES, NUM_CLASSES  # noqa: E402


@contextlib.contextmanager
def padded_inference_attention():
    original = attention.dot_product_attention
    attention.dot_product_attention = lambda q, k, v, training=False: original(q, k, v, training=True)
    try:
        yield
    finally:
        attention.dot_product_attention = original


@contextlib.contextmanager
def bf16_stream():
    original = residual.Float32Stream.input_dtype
    residual.Float32Stream.input_dtype = property(lambda self: self.compute_dtype)
    try:
        yield
    finally:
        residual.Float32Stream.input_dtype = original


@contextlib.contextmanager
def pallas_dense_gelu():
    original = mlp.MLPBlock.call

    def call(self, x, training=None):
        if type(self) is not mlp.MLPBlock or self.approximate_gelu:
            return original(self, x, training=training)
        dtype = self.compute_dtype
        kernel, bias = (keras.ops.cast(v, dtype) for v in (self.dense_0.kernel, self.dense_0.bias))
        interpret = jax.devices()[0].platform != "gpu"
        hidden = pallas_gelu.dense_gelu(keras.ops.cast(x, dtype), kernel, bias, interpret=interpret)
        return run(self.dropout, run(self.dense_1, run(self.dropout, hidden, training=training)), training=training)

    mlp.MLPBlock.call = call
    try:
        yield
    finally:
        mlp.MLPBlock.call = original


VARIANTS = {  # name -> (approximate_gelu, context)
    "shipped": (False, contextlib.nullcontext),
    "padded cuDNN attention": (False, padded_inference_attention),
    "tanh GELU": (True, contextlib.nullcontext),
    "bf16 stream": (False, bf16_stream),
    "Pallas dense+GELU": (False, pallas_dense_gelu),
}


def keras_model(args, approximate_gelu):
    """throughput.py's keras_vit model (frameworks.KerasViTRunner), its optimizer built."""
    cfg = dict(variant=args.variant, resolution=args.resolution, batch=args.batch, precision="mixed_bfloat16",
               jit=True, approximate_gelu=approximate_gelu)
    model = KerasViTRunner(cfg).model
    model.optimizer.build(model.trainable_variables)
    return model


def census(compiled_text):
    """The custom calls by target, and the fusions / copies / transposes of a compiled program."""
    targets = collections.Counter(re.findall(r'custom_call_target="([^"]+)"', compiled_text))
    counts = collections.Counter(op for op in hlo_ops(compiled_text) if op in ("fusion", "copy", "transpose"))
    return ", ".join(f"{k} {v}" for k, v in sorted({**targets, **counts}.items()))


def keras_flash_verdict(batch, tokens, heads, head_dim):
    from keras.src.backend.jax import nn

    q = jax.numpy.zeros((batch, tokens, heads, head_dim), "bfloat16")
    try:
        nn._can_use_flash_attention(q, q, q, None, raise_error=True)
        return "cuDNN flash attention"
    except Exception as error:  # the reason Keras falls back to XLA's attention
        return f"XLA attention ({type(error).__name__}: {str(error).splitlines()[0][:160]})"


def keras_case(args, mode, name, images, labels):
    """(run one step, its compiled program's text) of keras_vit under the variant `name`."""
    approximate_gelu, context = VARIANTS[name]
    with context():
        model = keras_model(args, approximate_gelu)
        if mode == "inference":
            fn, (trainable, non_trainable) = bare_predict_step(model)
            lowered = fn.lower(trainable, non_trainable, images)

            def step(fn=fn, t=trainable, n=non_trainable):
                return fn(t, n, images)
        else:
            fn, state = bare_train_step(model)
            lowered = fn.lower(state, images, labels)
            holder = {"state": state}

            def step(fn=fn, holder=holder):
                loss, holder["state"] = fn(holder["state"], images, labels)
                return loss
        text = lowered.compile().as_text()
        jax.block_until_ready(step())  # traced and compiled under the variant's change
    return step, text


def cases(args, images, labels):
    """name -> (run one step, its compiled program's text); a variant that fails to compile or
    run (a kernel the device refuses) is reported and left out."""
    built = {}
    for mode in args.modes:
        for name in args.keras_variants:
            if mode == "training" and name == "padded cuDNN attention":
                continue  # what training runs already
            try:
                built[f"{mode}: keras_vit {name}"] = keras_case(args, mode, name, images, labels)
            except Exception as error:
                print(f"{mode}: keras_vit {name}: FAILED ({type(error).__name__}: {str(error)[:200]!r})")
        runner = jax_vit.JaxViTRunner(dict(variant=args.variant, precision="mixed_bfloat16",
                                           resolution=args.resolution, batch=args.batch))
        if mode == "inference":
            text = runner.forward.lower(runner.params, runner.images).compile().as_text()
            step = lambda r=runner: r.forward(r.params, r.images)  # noqa: E731
        else:
            text = runner.step.lower(runner.params, runner.opt, runner.images, runner.labels).compile().as_text()

            def step(r=runner):
                r.params, r.opt, loss = r.step(r.params, r.opt, r.images, r.labels)
                return loss
        jax.block_until_ready(step())
        built[f"{mode}: jax_vit"] = (step, text)
    return built


def repeated(step, steps):
    """`steps` calls of `step`, waited for: a case of `step_overhead.measure`."""

    def run():
        out = None
        for _ in range(steps):
            out = step()
        jax.block_until_ready(out)

    return run


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--variant", default="ViTB16", choices=sorted(ARCHITECTURES))
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--resolution", type=int, default=224)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--modes", nargs="+", default=["inference", "training"], choices=("inference", "training"))
    parser.add_argument("--keras-variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    args = parser.parse_args(argv)
    for flag in ("batch", "resolution", "steps", "rounds"):
        if getattr(args, flag) < 1:
            parser.error(f"--{flag} must be >= 1")
    keras.config.set_dtype_policy("mixed_bfloat16")
    patch, width, _, heads, _ = ARCHITECTURES[args.variant]
    tokens = (args.resolution // patch) ** 2 + 1
    print(f"JAX {jax.__version__} on {jax.devices()[0].device_kind}; {args.variant} {args.resolution} px, "
          f"batch {args.batch}, mixed_bfloat16; XLA_FLAGS={os.environ.get('XLA_FLAGS', '')!r}")
    print(f"Keras' inference attention for q/k/v {(args.batch, tokens, heads, width // heads)}: "
          f"{keras_flash_verdict(args.batch, tokens, heads, width // heads)}")
    print("padded cuDNN probe:", fused_attention.padded_implementation("bfloat16", width // heads))
    rng = np.random.default_rng(0)
    images = jax.device_put(rng.uniform(-1, 1, (args.batch, args.resolution, args.resolution, 3)).astype("float32"))
    labels = jax.device_put(rng.integers(0, NUM_CLASSES, args.batch).astype("int32"))
    built = cases(args, images, labels)
    for name, (_, text) in built.items():
        print(f"{name}: {census(text)}")
    ms = measure({name: repeated(step, args.steps) for name, (step, _) in built.items()}, args.steps, args.rounds)
    print("\n| case | img/s | vs jax_vit |\n|---|---|---|")
    for name, value in ms.items():
        reference = ms[f"{name.split(':')[0]}: jax_vit"]
        print(f"| {name} | {args.batch * 1000 / value:,.0f} | {reference / value:.2f}x |")


if __name__ == "__main__":
    main()
