"""What Keras' train / predict paths add to the bare compiled step, on the JAX backend.

    python benchmarks/step_overhead.py                      # tiny ViT and Ti/16 at 64 px, batch 32
    python benchmarks/step_overhead.py --models small --steps 30 --rounds 5 --hlo
    python benchmarks/step_overhead.py --models b16 --batch 256 --dtype-policy mixed_bfloat16   # a GPU

For each model, the time per step of:

- `bare`: one `jax.jit` function (buffers donated) of `model.stateless_call` +
  `jax.value_and_grad` of the loss + `optimizer.stateless_apply`, on a batch already on the
  device; for inference a jitted `stateless_call`; each also with its result read on the host
  after every step (what `train_on_batch` / `predict_on_batch` must do);
- `train_on_batch` / `predict_on_batch`, given the NumPy batch and the on-device batch;
- `fit` / `predict` over NumPy arrays of `--fit-steps` batches, for each `--spe`
  (`steps_per_execution`), with the trainer's metrics (accuracy, top-5) and without metrics,
  and with a callback reading the loss on the host after every batch (as the trainer's
  `StopOnNaN` and `RunState` do).

Every Keras path uses the same model, loss (sparse cross-entropy on logits) and optimizer
(AdamW) as the bare step; each is warmed up (compiled) before timing, the cases take turns in
`--rounds` rounds and the median ms / step is printed with its ratio to `bare` (the first
row of each table). `--hlo`
also counts the instructions of the compiled programs (Keras' `train_step` under `jax.jit`
against the bare step). This script always runs the JAX backend.
"""

import argparse
import os
import re
import statistics
import sys
import time

os.environ["KERAS_BACKEND"] = "jax"
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jax  # noqa: E402
import keras  # noqa: E402
import numpy as np  # noqa: E402

import keras_vit  # noqa: E402

MODELS = {
    "tiny": dict(patch_size=4, hidden_dim=32, depth=2, num_heads=2, mlp_dim=64, input_shape=(16, 16, 3), classes=10),
    "small": dict(patch_size=16, hidden_dim=192, depth=12, num_heads=3, mlp_dim=768, input_shape=(64, 64, 3), classes=1000),
    "b16": dict(patch_size=16, hidden_dim=768, depth=12, num_heads=12, mlp_dim=3072, input_shape=(224, 224, 3), classes=1000),
}


def build(name, metrics, steps_per_execution=1):
    """A compiled logits ViT `name` (MODELS) with AdamW and, optionally, the trainer's metrics."""
    keras.utils.set_random_seed(0)
    model = keras_vit.VisionTransformer(classifier_activation=None, **MODELS[name])
    k = min(5, MODELS[name]["classes"])
    model.compile(
        optimizer=keras.optimizers.AdamW(1e-4),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=[keras.metrics.SparseCategoricalAccuracy(), keras.metrics.SparseTopKCategoricalAccuracy(k)]
        if metrics
        else None,
        steps_per_execution=steps_per_execution,
    )
    model.optimizer.build(model.trainable_variables)
    return model


def batch(name, size, seed=0):
    rng = np.random.default_rng(seed)
    shape = MODELS[name]["input_shape"]
    x = rng.uniform(-1, 1, (size, *shape)).astype("float32")
    y = rng.integers(0, MODELS[name]["classes"], size).astype("int32")
    return x, y


def bare_train_step(model):
    """The jitted `(state, x, y) -> (loss, state)` of plain JAX on the model's own pieces."""
    loss_fn, optimizer = model.loss, model.optimizer

    def loss_of(trainable, non_trainable, x, y):
        logits, non_trainable = model.stateless_call(trainable, non_trainable, x, training=True)
        return loss_fn(y, logits), non_trainable

    def step(state, x, y):
        trainable, non_trainable, opt_vars = state
        (loss, non_trainable), grads = jax.value_and_grad(loss_of, has_aux=True)(trainable, non_trainable, x, y)
        trainable, opt_vars = optimizer.stateless_apply(opt_vars, grads, trainable)
        return loss, (trainable, non_trainable, opt_vars)

    state = tuple(
        [jax.numpy.copy(v.value) for v in variables]
        for variables in (model.trainable_variables, model.non_trainable_variables, optimizer.variables)
    )
    return jax.jit(step, donate_argnums=0), state


def bare_predict_step(model):
    def predict(trainable, non_trainable, x):
        return model.stateless_call(trainable, non_trainable, x, training=False)[0]

    # copies: Keras' own predict / train functions donate (delete) the model's buffers
    state = [[jax.numpy.copy(v.value) for v in variables]
             for variables in (model.trainable_variables, model.non_trainable_variables)]
    return jax.jit(predict), state


class ReadLoss(keras.callbacks.Callback):
    """Reads the loss on the host after every batch, as the trainer's NaN check and RunState do."""

    def on_train_batch_end(self, batch, logs=None):
        float(np.asarray(logs["loss"]))


def training_cases(name, size, steps, fit_steps, spes):
    """name -> a function running `steps` training steps until done (or returning their seconds)."""
    x, y = batch(name, size)
    x_dev, y_dev = jax.device_put(x), jax.device_put(y)
    cases = {}

    model = build(name, metrics=False)
    step, state = bare_train_step(model)
    holder = {"state": state}

    def bare():
        loss = None
        for _ in range(steps):
            loss, holder["state"] = step(holder["state"], x_dev, y_dev)
        jax.block_until_ready(loss)

    def bare_synced():  # the loss read on the host after every step, as train_on_batch does
        for _ in range(steps):
            loss, holder["state"] = step(holder["state"], x_dev, y_dev)
            float(loss)

    cases["bare jit step"] = bare
    cases["bare jit step, loss to host each step"] = bare_synced
    for metrics in (False, True):
        model = build(name, metrics)
        suffix = ", metrics" if metrics else ""

        def on_batch(model=model, xs=x, ys=y):
            for _ in range(steps):
                model.train_on_batch(xs, ys)

        cases[f"train_on_batch numpy{suffix}"] = on_batch
        cases[f"train_on_batch device{suffix}"] = lambda model=model: on_batch(model, x_dev, y_dev)
        xs, ys = np.concatenate([x] * fit_steps), np.concatenate([y] * fit_steps)
        for spe in spes:
            def fit(model=build(name, metrics, spe)):
                start = time.perf_counter()
                model.fit(xs, ys, batch_size=size, epochs=1, shuffle=False, verbose=0)
                jax.block_until_ready(model.trainable_variables[0].value)
                return (time.perf_counter() - start) * steps / fit_steps  # scaled to `steps` steps

            cases[f"fit numpy spe={spe}{suffix}"] = fit
        reads = ReadLoss()

        def fit_reading_loss(model=build(name, metrics)):
            start = time.perf_counter()
            model.fit(xs, ys, batch_size=size, epochs=1, shuffle=False, verbose=0, callbacks=[reads])
            jax.block_until_ready(model.trainable_variables[0].value)
            return (time.perf_counter() - start) * steps / fit_steps

        cases[f"fit numpy spe=1{suffix}, loss read each step"] = fit_reading_loss
    return cases


def inference_cases(name, size, steps, fit_steps):
    x, _ = batch(name, size)
    x_dev = jax.device_put(x)
    model = build(name, metrics=False)
    predict, (trainable, non_trainable) = bare_predict_step(model)

    def bare():
        out = None
        for _ in range(steps):
            out = predict(trainable, non_trainable, x_dev)
        jax.block_until_ready(out)

    def bare_synced():  # the output copied to NumPy after every step, as predict_on_batch does
        for _ in range(steps):
            np.asarray(predict(trainable, non_trainable, x_dev))

    def on_batch(xs):
        for _ in range(steps):
            model.predict_on_batch(xs)

    xs = np.concatenate([x] * fit_steps)

    def predict_all():
        start = time.perf_counter()
        model.predict(xs, batch_size=size, verbose=0)
        return (time.perf_counter() - start) * steps / fit_steps

    return {
        "bare jit stateless_call": bare,
        "bare, output to NumPy each step": bare_synced,
        "predict_on_batch numpy": lambda: on_batch(x),
        "predict_on_batch device": lambda: on_batch(x_dev),
        "predict numpy": predict_all,
    }


def timed(function):
    start = time.perf_counter()
    result = function()
    return result if result is not None else time.perf_counter() - start


def measure(cases, steps, rounds):
    """Median ms / step of each case over `rounds` rounds (after one warm-up round)."""
    for function in cases.values():
        function()
    times = {name: [] for name in cases}
    for _ in range(rounds):
        for name, function in cases.items():
            times[name].append(timed(function) / steps * 1000)
    return {name: statistics.median(values) for name, values in times.items()}


def hlo_counts(name, size):
    """Instructions in the compiled programs: Keras' jitted train_step against the bare step."""
    x, y = batch(name, size)
    counts = {}
    for metrics in (False, True):
        model = build(name, metrics)
        state = tuple(
            [v.value for v in variables]
            for variables in (model.trainable_variables, model.non_trainable_variables,
                              model.optimizer.variables, model.metrics_variables)
        )
        text = jax.jit(model.train_step).lower(state, (x, y)).compile().as_text()
        counts[f"keras train_step{', metrics' if metrics else ''}"] = _count(text)
    step, state = bare_train_step(build(name, metrics=False))
    counts["bare step"] = _count(step.lower(state, x, y).compile().as_text())
    return counts


def hlo_ops(text):
    """The op of every instruction of a compiled program's text (`fusion`, `copy`, `dot`, ...)."""
    return re.findall(r"^\s*(?:ROOT )?%?\S+ = \S+ (\S+?)\(", text, flags=re.M)


def _count(text):
    instructions = hlo_ops(text)
    return {
        "instructions": len(instructions),
        "fusions": sum(op == "fusion" for op in instructions),
        "custom-calls": sum(op == "custom-call" for op in instructions),
        "dots": text.count(" dot("),
    }


def table(title, results):
    base = next(iter(results.values()))
    lines = [f"\n{title}\n", "| path | ms / step | vs bare |", "|---|---|---|"]
    lines += [f"| {name} | {ms:.2f} | {ms / base:.2f}x |" for name, ms in results.items()]
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", nargs="+", default=["tiny", "small"], choices=sorted(MODELS))
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--steps", type=int, default=20, help="timed steps per case and round")
    parser.add_argument("--fit-steps", type=int, default=20, help="batches in the arrays given to fit / predict")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--spe", nargs="+", type=int, default=[1, 8], help="steps_per_execution values for fit")
    parser.add_argument("--modes", nargs="+", default=["training", "inference"], choices=("training", "inference"))
    parser.add_argument("--hlo", action="store_true", help="also count the compiled programs' instructions")
    parser.add_argument("--dtype-policy", default="float32", choices=("float32", "mixed_bfloat16"))
    args = parser.parse_args(argv)
    keras.config.set_dtype_policy(args.dtype_policy)
    counts = dict(batch=args.batch, steps=args.steps, fit_steps=args.fit_steps, rounds=args.rounds, spe=min(args.spe))
    for flag, value in counts.items():
        if value < 1:
            parser.error(f"--{flag.replace('_', '-')} must be >= 1")
    print(f"JAX {jax.__version__} on {jax.devices()[0].device_kind}; batch {args.batch}, {args.dtype_policy}; "
          f"load average {os.getloadavg()[0]:.1f}")
    for name in args.models:
        shape = MODELS[name]["input_shape"]
        fields = ", ".join(f"{k}={v}" for k, v in MODELS[name].items() if k != "input_shape")
        label = f"{name} ViT ({shape[0]} px, {fields})"
        if "training" in args.modes:
            cases = training_cases(name, args.batch, args.steps, args.fit_steps, args.spe)
            results = measure(cases, args.steps, args.rounds)
            print(table(f"training, {label}", results), flush=True)
        if "inference" in args.modes:
            results = measure(inference_cases(name, args.batch, args.steps, args.fit_steps), args.steps, args.rounds)
            print(table(f"inference, {label}", results), flush=True)
        if args.hlo:
            print(f"\ncompiled train step, {name}: " + "; ".join(
                f"{path}: " + ", ".join(f"{k} {v}" for k, v in counts.items())
                for path, counts in hlo_counts(name, args.batch).items()))


if __name__ == "__main__":
    main()
