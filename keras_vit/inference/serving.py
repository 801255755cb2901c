"""Export a trained model for serving: TensorFlow SavedModel and ONNX, each checked after writing.

- SavedModel: Keras' own `model.export(format="tf_saved_model")` (TensorFlow and JAX
  backends); on PyTorch the `.keras` file is exported by a TensorFlow-backend subprocess.
- ONNX: Keras' own `model.export(format="onnx")` where its converter is installed
  (tf2onnx / jax2onnx); otherwise the PyTorch backend's `torch.onnx` dynamo exporter with a
  dynamic batch axis (in a PyTorch-backend subprocess when the current backend is another).

`verify` loads the artefact (tf.saved_model / onnxruntime), runs it on random images and
compares with the Keras model: the export is rejected if they differ by more than `atol`.
An export is written next to its output path and swapped in only once written and verified;
it replaces an earlier export of the same format, anything else only with `overwrite=True`.
"""

import importlib.util
import json
import os
import subprocess
import sys
import tempfile

import keras
import numpy as np

import keras_vit.layers  # noqa: F401  (registers the layers for keras.saving.load_model)
from keras_vit.files import atomic_path, check_target
from keras_vit.run_folder import load_keras_file

FORMATS = ("saved_model", "onnx")
# What marks an export as keras_vit's: a file in a SavedModel folder, a metadata entry in ONNX.
MARK, MARK_VALUE = "written_by", "keras_vit"
SAVED_MODEL_MARK = "keras_vit_export.json"
SAVED_MODEL_ENTRIES = {"saved_model.pb", "fingerprint.pb", "keras_metadata.pb", "variables", "assets", SAVED_MODEL_MARK}


class ExportMismatch(ValueError):
    """The exported model's outputs differ from the Keras model's."""


def _size_step(model):
    """What an input side must be a multiple of: the patch size (times a hybrid stem's stride)."""
    stem = next((layer for layer in model.layers if layer.name == "stem"), None)
    return model.get_layer("embedding").patch_size * (stem.stride if stem is not None else 1)


def input_shapes(model):
    """The input shapes an export is traced and checked at: the model's own, or for a model of
    any height and width (`input_shape=(None, None, 3)`) its position-embedding grid's size and
    a larger, non-square one."""
    height, width, channels = model.inputs[0].shape[1:]
    if height is not None and width is not None:
        return [(height, width, channels)]
    step = _size_step(model)
    rows, cols = model.get_layer("posembed_input").grid_size
    return [
        (height or rows * step, width or cols * step, channels),
        (height or (rows + 1) * step, width or (cols + 2) * step, channels),
    ]


def sample_images(model, count=3, seed=0, shape=None):
    """Random inputs in [-1, 1] of `shape` (default: the first of `input_shapes(model)`)."""
    rng = np.random.default_rng(seed)
    return rng.uniform(-1.0, 1.0, (count, *(shape or input_shapes(model)[0]))).astype("float32")


def _run_in_backend(backend, fmt, model_path, output):
    env = {**os.environ, "KERAS_BACKEND": backend, "TF_CPP_MIN_LOG_LEVEL": "3"}
    command = [sys.executable, "-m", "keras_vit.inference.serving", fmt, model_path, output]
    proc = subprocess.run(command, env=env, capture_output=True, text=True)
    if proc.returncode:
        raise RuntimeError(f"Exporting {model_path} to {fmt} with the {backend} backend failed:\n{proc.stderr[-3000:]}")


def _torch_onnx(model, output):
    import torch

    batch = torch.export.Dim("batch", min=1, max=4096)
    axes = {0: batch}
    height, width = model.inputs[0].shape[1:3]
    if height is None or width is None:  # any size: the multiples of the patch (and stem) stride
        step = _size_step(model)
        axes.update({1: step * torch.export.Dim("rows", min=1, max=1024)} if height is None else {})
        axes.update({2: step * torch.export.Dim("cols", min=1, max=1024)} if width is None else {})
    example = torch.zeros((2, *input_shapes(model)[0]))
    model.eval()
    program = torch.onnx.export(
        model,
        (example,),
        input_names=["images"],
        output_names=["predictions"],
        dynamo=True,
        dynamic_shapes=((axes,),),
        verbose=False,
    )
    program.optimize()
    program.save(output)


def _write(model, fmt, output):
    """Exports an in-memory model in this process; False if this backend cannot."""
    backend = keras.backend.backend()
    if fmt == "saved_model":
        if backend not in ("tensorflow", "jax"):
            return False
        model.export(output, format="tf_saved_model", verbose=False)
        return True
    if _keras_onnx_converter():
        model.export(output, format="onnx", verbose=False)
        return True
    if backend == "torch":
        _torch_onnx(model, output)
        return True
    return False


def _mark(fmt, path):
    """Marks the export at `path` as keras_vit's, so that `is_export` recognises it."""
    if fmt == "saved_model":
        with open(os.path.join(path, SAVED_MODEL_MARK), "w", encoding="utf-8") as f:
            json.dump({MARK: MARK_VALUE, "format": fmt}, f)
        return
    import onnx

    proto = onnx.load(path, load_external_data=False)
    onnx.helper.set_model_props(proto, {**{p.key: p.value for p in proto.metadata_props}, MARK: MARK_VALUE})
    onnx.save(proto, path)


def is_export(fmt, path):
    """Whether `path` holds an earlier keras_vit export of `fmt` (which a new one may replace):
    one that `export` marked, not merely any SavedModel or ONNX file."""
    if fmt == "saved_model":
        entries = set(os.listdir(path)) if os.path.isdir(path) else set()
        if not ("saved_model.pb" in entries and SAVED_MODEL_MARK in entries and entries <= SAVED_MODEL_ENTRIES):
            return False
        try:
            with open(os.path.join(path, SAVED_MODEL_MARK), encoding="utf-8") as f:
                return json.load(f).get(MARK) == MARK_VALUE
        except (OSError, ValueError, AttributeError):
            return False
    if not os.path.isfile(path) or not _installed("onnx"):
        return False
    import onnx
    from google.protobuf.message import DecodeError

    try:
        proto = onnx.load(path, load_external_data=False)
    except (DecodeError, OSError, ValueError):
        return False
    return any(p.key == MARK and p.value == MARK_VALUE for p in proto.metadata_props)


def check_output(fmt, output, model_path=None, overwrite=False):
    """Raises OSError unless `output` may receive a `fmt` export (see `files.check_target`);
    never the model file being exported, nor a folder holding it."""
    inputs = (model_path,) if model_path else ()
    check_target(output, overwrite=overwrite, folder=fmt == "saved_model", replaceable=is_export(fmt, output), inputs=inputs)


def _installed(name):
    module = sys.modules.get(name, False)
    return module is not None if module is not False else importlib.util.find_spec(name) is not None


def _keras_onnx_converter():
    """The converter Keras' own ONNX export uses on this backend, if installed."""
    name = {"tensorflow": "tf2onnx", "jax": "jax2onnx"}.get(keras.backend.backend())
    return name if name and _installed(name) else None


def check_requirements(fmt, verify_outputs=True):
    """Raises ImportError (one clear line) if this environment cannot write (and verify) `fmt`."""
    needed = ("tensorflow",) if fmt == "saved_model" else ("torch", "onnxscript", "onnx")
    if fmt == "onnx" and _keras_onnx_converter():
        needed = ("onnx",)
    if fmt == "onnx" and verify_outputs:
        needed += ("onnxruntime",)
    missing = [name for name in needed if not _installed(name)]
    if missing:
        raise ImportError(
            f"Exporting to {fmt} needs the package(s) {', '.join(missing)}, which are not installed "
            '(pip install "keras-vit[export]").'
        )


def export(model, fmt, output, *, verify_outputs=True, atol=1e-4, overwrite=False, quantize=None):
    """Writes `model` (a `keras.Model` or a `.keras` path) as `fmt` to `output`; returns the
    largest absolute difference found by `verify` (None when not verified). What is at
    `output` is replaced only by a complete, verified export, and only if it is an earlier
    export of `fmt` or `overwrite` is set. `quantize` ("int8", "float8", "int4") exports a
    quantized copy (see `keras_vit.training.quantization`), verified against that copy."""
    if fmt not in FORMATS:
        raise ValueError(f"format={fmt!r}; expected one of {FORMATS}.")
    model_path = os.fspath(model) if isinstance(model, (str, os.PathLike)) else None
    check_requirements(fmt, verify_outputs)
    check_output(fmt, output, model_path, overwrite)
    if model_path is not None:
        model = load_keras_file(model_path)
    if quantize is not None:
        from keras_vit.training.quantization import quantized_copy

        model, model_path = quantized_copy(model, quantize), None
    error = None
    with atomic_path(output) as tmp:
        if not _write(model, fmt, tmp):
            with tempfile.TemporaryDirectory() as folder:
                if model_path is None:
                    model_path = os.path.join(folder, "model.keras")
                    model.save(model_path)
                _run_in_backend("tensorflow" if fmt == "saved_model" else "torch", fmt, model_path, tmp)
        _mark(fmt, tmp)
        if verify_outputs:
            try:
                error = verify(model, fmt, tmp, atol=atol)
            except ExportMismatch as mismatch:
                raise ExportMismatch(f"{mismatch} Nothing was written to {output}.") from None
    return error


def run_exported(fmt, path, images):
    """Outputs of an exported model on `images` (NumPy)."""
    if fmt == "saved_model":
        import tensorflow as tf

        loaded = tf.saved_model.load(path)  # kept referenced while `serve` runs
        return np.asarray(loaded.serve(images))
    import onnxruntime

    session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
    return session.run(None, {session.get_inputs()[0].name: images})[0]


def verify(model, fmt, path, *, atol=1e-4):
    """Max |exported - keras| on random images (at each of `input_shapes(model)`); raises
    `ExportMismatch` above `atol`."""
    error = 0.0
    for shape in input_shapes(model):
        images = sample_images(model, shape=shape)
        expected = keras.ops.convert_to_numpy(model(images, training=False))
        got = run_exported(fmt, path, images)
        if got.shape != expected.shape:
            raise ExportMismatch(f"The {fmt} export outputs shape {got.shape}, the model {expected.shape}.")
        error = max(error, float(np.max(np.abs(got - expected))))
    if not error <= atol:
        raise ExportMismatch(f"The {fmt} export differs from the model by {error:.3g} (> {atol}).")
    return error


if __name__ == "__main__":  # used by `export` to convert in another backend's process
    fmt, source, target = sys.argv[1:4]
    if not _write(load_keras_file(source), fmt, target):
        sys.exit(f"the {keras.backend.backend()} backend cannot write {fmt}")
