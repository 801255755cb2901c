"""Post-training quantization side by side: float32 against `model.quantize(mode)` in one run.

    KERAS_BACKEND=torch python benchmarks/quantize.py                       # ViT-B/16, random weights
    KERAS_BACKEND=jax python benchmarks/quantize.py --model runs/digits/best.keras --data digits

For each mode (float32 first): the logits' largest and relative error against float32 on the
same images, the CPU latency of one batch (Keras' `predict_on_batch`; median of `--rounds`
after a warm-up, the modes taking turns in each round), the size of the saved `.keras` file
and, with `--data`, top-1 on the validation split of the model's run. Random weights: Glorot
encoder, N(0, 0.02) embeddings, a N(0, 1/width) head (the builder's zero head would make every
logit 0).
"""

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

import numpy as np

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import keras  # noqa: E402

import keras_vit  # noqa: E402
from keras_vit.inference.quantization import MODES, quantized_copy  # noqa: E402
from workload import weights_like_a_trained_vit  # noqa: E402


def random_vit(name, size):
    keras.utils.set_random_seed(0)
    model = getattr(keras_vit, name)(weights=None, input_shape=(size, size, 3), classifier_activation=None)
    weights_like_a_trained_vit(model)
    return model


def latencies(models, images, rounds):
    """The median latency of one batch of each model, the models taking turns in every round
    (after a warm-up each), so that a change of the machine's load hits them all alike."""
    for model in models:
        model.predict_on_batch(images)
    times = [[] for _ in models]
    for _ in range(rounds):
        for model, measured in zip(models, times):
            start = time.perf_counter()
            keras.ops.convert_to_numpy(model.predict_on_batch(images))
            measured.append(time.perf_counter() - start)
    return [statistics.median(measured) for measured in times]


def saved_size(model):
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "model.keras")
        model.save(path)
        return os.path.getsize(path)


def top1(model, path, data):
    from keras_vit.data import pipeline
    from keras_vit.evaluation.classification import recorded_source

    source = recorded_source(path, data)
    size = model.inputs[0].shape[1]
    right = total = 0
    for images, labels in pipeline.eval_dataset(source, size, 256).as_numpy_iterator():
        predicted = np.argmax(keras.ops.convert_to_numpy(model.predict_on_batch(images)), axis=-1)
        right, total = right + int(np.sum(predicted == labels)), total + len(labels)
    return right / total


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--variant", default="ViTB16", help="random-weight variant (without --model)")
    parser.add_argument("--model", help="a trained .keras model instead")
    parser.add_argument("--data", help="with --model: also top-1 on this data's validation split")
    parser.add_argument("--resolution", type=int, default=224)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--json", help="write the results here")
    args = parser.parse_args(argv)
    model = keras.saving.load_model(args.model) if args.model else random_vit(args.variant, args.resolution)
    size = model.inputs[0].shape[1]
    images = np.random.default_rng(1).uniform(-1, 1, (args.batch, size, size, 3)).astype("float32")
    reference = keras.ops.convert_to_numpy(model.predict_on_batch(images)).astype(np.float64)
    modes = ["float32", *args.modes.split(",")]
    candidates = [model if mode == "float32" else quantized_copy(model, mode) for mode in modes]
    rows = []
    for mode, candidate, seconds in zip(modes, candidates, latencies(candidates, images, args.rounds)):
        logits = keras.ops.convert_to_numpy(candidate.predict_on_batch(images)).astype(np.float64)
        row = {
            "mode": mode,
            "max_abs_error": float(np.abs(logits - reference).max()),
            "relative_error": float(np.linalg.norm(logits - reference) / np.linalg.norm(reference)),
            "argmax_agreement": float(np.mean(logits.argmax(-1) == reference.argmax(-1))),
            "latency_ms": 1000 * seconds,
            "file_mb": saved_size(candidate) / 2**20,
        }
        if args.model and args.data:
            row["top1"] = top1(candidate, args.model, args.data)
        rows.append(row)
        print(json.dumps(row), flush=True)
    if args.json:
        with open(args.json, "w") as handle:
            json.dump({"backend": keras.backend.backend(), "args": vars(args), "results": rows}, handle, indent=1)


if __name__ == "__main__":
    main()
