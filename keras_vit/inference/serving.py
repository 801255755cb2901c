"""Export a trained model for serving (TensorFlow SavedModel, ONNX, LiteRT, OpenVINO, a
PyTorch program), each checked after writing. Every format keeps the batch size, and for a
model of any size (`input_shape=(None, None, 3)`) the height and width, dynamic.

- SavedModel: Keras' own `model.export(format="tf_saved_model")` (TensorFlow and JAX
  backends); on PyTorch the `.keras` file is exported by a TensorFlow-backend subprocess.
  From JAX, jax2tf traces a dynamic height and width as multiples of the patch size
  (`_jax_shapes`): as free symbols the token count `(h - p) // p + 1` could be negative to
  jax2tf, which then cannot decide the token reshape.
- ONNX: Keras' own `model.export(format="onnx")` where its converter is installed
  (tf2onnx / jax2onnx); otherwise the PyTorch backend's `torch.onnx` dynamo exporter with a
  dynamic batch axis (in a PyTorch-backend subprocess when the current backend is another).
- LiteRT (`.tflite`) and OpenVINO (a folder: `model.xml`, `model.bin`): Keras' own export
  from the TensorFlow backend (a TensorFlow-backend subprocess from JAX or PyTorch): Keras'
  LiteRT export from PyTorch (litert-torch) fixes every dynamic dimension to 1
  (keras-team/keras#22996), its OpenVINO export from PyTorch traces one fixed size, and
  neither exists from JAX.
- torch (`.pt2`, `torch.export.load(path).module()`): Keras' own `format="torch"` with
  dynamic dimensions (PyTorch backend; a PyTorch-backend subprocess from the others).

A text tower (`keras_vit.text.text_transformer`, an `ImageTextModel`'s `text_model`) takes its
`(batch, context)` int32 token ids, `token_ids`, the batch (the number of strings) dynamic; the
files of its tokenizer are copied beside the export, into `OUTPUT.tokenizer/`, and the card
names them (`image_text_export.export_tower`, `keras-vit export FOLDER --tower text`).

A NaFlex model (`naflex=True`) takes, in every format, its three inputs by name: `patches`
`(batch, n, patch * patch * 3)`, `spatial_shapes` `(batch, 2)` and `mask` `(batch, n)` (int32),
the batch and the patch budget `n` dynamic (`keras_vit.data.naflex_inputs.naflex_inputs` makes them); the
PyTorch program and the SavedModel take them as one dict, ONNX, LiteRT and OpenVINO as three
named inputs.

`verify` loads the artefact in its runtime (tf.saved_model, onnxruntime, ai-edge-litert,
OpenVINO at float32 precision, torch), runs it on random images and compares with the Keras
model: the export is rejected if they differ by more than `atol`. An export is written next
to its output path and swapped in only once written and verified; it replaces an earlier
export of the same format (LiteRT files carry no mark: always with `overwrite=True`),
anything else only with `overwrite=True`.
"""

import dataclasses
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile

import keras
import numpy as np

import keras_vit.model  # noqa: F401  (registers the layers and the model class for keras.saving.load_model)
from keras_vit.utils.files import atomic_path, check_target, write_json
from keras_vit.inference.serving_card import card, card_path, is_card, tokenizer_path
from keras_vit.inspect.model_parts import input_step, is_naflex, position_layer, vit_part
from keras_vit.run_folder import load_keras_file, metadata
from keras_vit.text.model import is_text_model, sample_ids


@dataclasses.dataclass(frozen=True)
class Format:
    """How one export format is written and run."""

    suffix: str  # the output's name ending when several formats are written at once
    writers: tuple  # the backends whose `model.export` writes it; from the others, a subprocess of the first
    needs: tuple  # the packages that write it
    runtime: tuple = ()  # the packages that run it (`verify`)
    entries: frozenset = frozenset()  # a folder format: the names it may hold (REQUIRED_ENTRY among them)
    quantize: tuple = ("int8", "float8", "int4")  # the `model.quantize` modes whose export writes and runs
    suffix_needed: bool = False  # the runtime wants the ending even for one format (torch.export.load warns without)


# What marks an export as keras_vit's: a file in a folder format and in a PyTorch program's
# archive, a metadata entry in ONNX. A LiteRT file has no place for one.
MARK, MARK_VALUE = "written_by", "keras_vit"
MARK_FILE = "keras_vit_export.json"
SPECS = {
    "saved_model": Format(
        ".savedmodel", ("tensorflow", "jax"), ("tensorflow",),
        entries=frozenset({"saved_model.pb", "fingerprint.pb", "keras_metadata.pb", "variables", "assets", MARK_FILE}),
    ),
    # or Keras' converter; onnxruntime refuses the int4 graph (an int8 tensor subtracted from a float one)
    "onnx": Format(".onnx", ("torch",), ("torch", "onnxscript", "onnx"), ("onnxruntime",), quantize=("int8", "float8")),
    # LiteRT's fully_connected takes no int8 tensors (Keras' int8 matmuls multiply them); no float8 type
    "litert": Format(".tflite", ("tensorflow",), ("tensorflow",), ("ai_edge_litert",), quantize=("int4",)),
    # OpenVINO's CPU plugin cannot convert to float8, and runs Keras' int8 matmuls about 1 off the
    # quantized model (ai-edge-litert 2.3.0, openvino 2026.4.1)
    "openvino": Format(".openvino", ("tensorflow",), ("tensorflow", "openvino"), ("openvino",),
                       entries=frozenset({"model.xml", "model.bin", MARK_FILE}), quantize=("int4",)),
    "torch": Format(".pt2", ("torch",), ("torch",), suffix_needed=True),
}
FORMATS = tuple(SPECS)
NAFLEX_INPUTS = ("patches", "spatial_shapes", "mask")  # a NaFlex model's inputs, in the order ONNX takes them
REQUIRED_ENTRY = {"saved_model": "saved_model.pb", "openvino": "model.xml"}


class ExportMismatch(ValueError):
    """The exported model's outputs differ from the Keras model's."""


def naflex_budgets(model):
    """The patch budgets a NaFlex export is traced and checked at: its position grid's size and a
    larger one."""
    rows, cols = model.get_layer("posembed_input").grid_size
    return [rows * cols, 2 * rows * cols + 3]


def naflex_sample(model, count=3, seed=0, budget=None):
    """A NaFlex model's inputs (`naflex_inputs`) for `count` random images of several aspect ratios
    under `budget` patches (default: the first of `naflex_budgets`), some leaving part of it padding."""
    from keras_vit.data.naflex_inputs import naflex_inputs

    rng = np.random.default_rng(seed)
    patch = model.get_layer("embedding").patch_size
    shapes = ((3, 5), (1, 2), (8, 2), (2, 2))
    images = [rng.uniform(0, 255, (h * patch, w * patch, 3)).astype("float32") for h, w in
              (shapes[i % len(shapes)] for i in range(count))]
    return naflex_inputs(images, model, max_num_patches=budget or naflex_budgets(model)[0])


def sample_inputs(model, count=3, seed=0):
    """The inputs `verify` checks an export at: `sample_images` at each of `input_shapes(model)`,
    or NaFlex inputs (`naflex_sample`) at each of `naflex_budgets(model)`."""
    if is_naflex(model):
        return [naflex_sample(model, count, seed, budget) for budget in naflex_budgets(model)]
    if is_text_model(model):
        return [sample_ids(model, count, seed)]
    return [sample_images(model, count, seed, shape) for shape in input_shapes(model)]


def input_shapes(model):
    """The input shapes an export is traced and checked at: the model's own, or for a model of
    any height and width (`input_shape=(None, None, 3)`) its position-embedding grid's size and
    a larger, non-square one."""
    height, width, channels = model.inputs[0].shape[1:]
    if height is not None and width is not None:
        return [(height, width, channels)]
    step = input_step(model)
    rows, cols = position_layer(vit_part(model)).grid_size
    return [
        (height or rows * step, width or cols * step, channels),
        (height or (rows + 1) * step, width or (cols + 2) * step, channels),
    ]


def sample_images(model, count=3, seed=0, shape=None):
    """Random inputs in [-1, 1] of `shape` (default: the first of `input_shapes(model)`)."""
    rng = np.random.default_rng(seed)
    return rng.uniform(-1.0, 1.0, (count, *(shape or input_shapes(model)[0]))).astype("float32")


def _torch_dims(model):
    """`torch.export` dynamic dimensions of the image input: the batch, and for a model of any
    size its height and width (multiples of the patch and stem stride); of a NaFlex model's
    inputs (a dict by name): the batch and the patch budget."""
    import torch

    axes = {0: torch.export.Dim("batch", min=1, max=4096)}
    if is_text_model(model):
        return axes
    if is_naflex(model):
        patches = {1: torch.export.Dim("patches", min=1, max=65536)}
        return {"patches": {**axes, **patches}, "spatial_shapes": axes, "mask": {**axes, **patches}}
    height, width = model.inputs[0].shape[1:3]
    step = input_step(model)
    axes.update({1: step * torch.export.Dim("rows", min=1, max=1024)} if height is None else {})
    axes.update({2: step * torch.export.Dim("cols", min=1, max=1024)} if width is None else {})
    return axes


def _jax_shapes(model):
    """jax2tf's `polymorphic_shapes` of the image input: the batch, and for a model of any size
    its height and width as multiples of the patch size (and stem stride), as `_torch_dims`; of a
    NaFlex model's inputs: the batch and the patch budget."""
    if is_naflex(model):
        values = model.input["patches"].shape[-1]
        return [{"patches": f"(batch, n, {values})", "spatial_shapes": "(batch, 2)", "mask": "(batch, n)"}]
    if is_text_model(model):
        return [f"(batch, {model.inputs[0].shape[1]})"]
    height, width, channels = model.inputs[0].shape[1:]
    step = input_step(model)
    rows, cols = (f"{step}*{name}" if dim is None else str(dim) for dim, name in ((height, "rows"), (width, "cols")))
    return [f"(batch, {rows}, {cols}, {channels})"]


def _jax_cannot_trace(model):
    """Whether jax2tf cannot trace `model` at a dynamic size: a DPT head's strided reassembly convolution, whose
    padding jax2tf cannot take as a symbolic expression (the TensorFlow backend's process writes it instead)."""
    if "dpt_head" not in [layer.name for layer in model.layers]:
        return False
    return not is_naflex(model) and None in tuple(model.inputs[0].shape[1:3])


def _run_in_backend(backend, fmt, model_path, output):
    env = {**os.environ, "KERAS_BACKEND": backend, "TF_CPP_MIN_LOG_LEVEL": "3"}
    command = [sys.executable, "-m", "keras_vit.inference.serving", fmt, model_path, output]
    proc = subprocess.run(command, env=env, capture_output=True, text=True)
    if proc.returncode:
        raise RuntimeError(f"Exporting {model_path} to {fmt} with the {backend} backend failed:\n{proc.stderr[-3000:]}")


def _named_inputs(model):
    """A `torch.nn.Module` running a NaFlex `model` on its three inputs given one by one (ONNX names
    them; `torch.onnx.export` would take one dict argument for keyword arguments)."""
    import torch

    class NamedInputs(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, patches, spatial_shapes, mask):
            return self.model({"patches": patches, "spatial_shapes": spatial_shapes, "mask": mask})

    return NamedInputs()


def _torch_onnx(model, output):
    import torch

    model.eval()
    if is_naflex(model):
        names, dims = NAFLEX_INPUTS, _torch_dims(model)
        sample = naflex_sample(model, count=2)
        module, example, dynamic = _named_inputs(model), tuple(torch.from_numpy(sample[n]) for n in names), tuple(
            dims[n] for n in names)
    elif is_text_model(model):
        names, module = ["token_ids"], model
        example, dynamic = (torch.from_numpy(sample_ids(model, count=2)),), ((_torch_dims(model),),)
    else:
        names, module = ["images"], model
        example, dynamic = (torch.zeros((2, *input_shapes(model)[0])),), ((_torch_dims(model),),)
    program = torch.onnx.export(
        module,
        example,
        input_names=list(names),
        output_names=output_names(model) or ["predictions"],
        dynamo=True,
        dynamic_shapes=dynamic,
        verbose=False,
    )
    program.optimize()
    program.save(output)


def _torch_program(model, output):
    """Keras' `format="torch"` export with `_torch_dims`, traced at `input_shapes(model)[0]`."""
    import torch

    if is_naflex(model):
        signature = [{name: keras.InputSpec(shape=(None, *value.shape[1:]), dtype=str(value.dtype))
                      for name, value in naflex_sample(model).items()}]
        dims = (_torch_dims(model),)
    elif is_text_model(model):
        signature, dims = [keras.InputSpec(shape=(None, model.inputs[0].shape[1]), dtype="int32")], _torch_dims(model)
    else:
        signature = [keras.InputSpec(shape=(None, *input_shapes(model)[0]), dtype="float32")]
        dims = _torch_dims(model)
    # torch.einsum's opt_einsum path search reads the sizes, which would fix the height and width.
    with torch.backends.opt_einsum.flags(enabled=False):
        _keras_export(model, output, "torch", input_signature=signature, dynamic_shapes=dims)


def _keras_export(model, output, fmt, **options):
    """`model.export` to the file `output`, under a name with the ending Keras requires."""
    suffix = SPECS[fmt].suffix
    path = output if output.endswith(suffix) else output + suffix
    try:
        model.export(path, format=fmt, verbose=False, **options)
        os.replace(path, output)
    finally:
        if path != output and os.path.exists(path):
            os.remove(path)


def _write(model, fmt, output):
    """Exports an in-memory model in this process; False if this backend cannot."""
    backend = keras.backend.backend()
    if fmt == "onnx":
        if _keras_onnx_converter():
            model.export(output, format="onnx", verbose=False)
            return True
        if backend == "torch":
            _torch_onnx(model, output)
            return True
        return False
    if backend not in SPECS[fmt].writers or backend == "jax" and _jax_cannot_trace(model):
        return False
    if fmt == "saved_model":
        options = {"jax2tf_kwargs": {"polymorphic_shapes": _jax_shapes(model)}} if backend == "jax" else {}
        model.export(output, format="tf_saved_model", verbose=False, **options)
    elif fmt == "openvino":
        os.makedirs(output)
        model.export(os.path.join(output, "model.xml"), format="openvino", verbose=False)
    elif fmt == "torch":
        _torch_program(model, output)
    else:
        _keras_export(model, output, fmt)
    return True


def _mark(fmt, path):
    """Marks the export at `path` as keras_vit's, so that `is_export` recognises it."""
    record = json.dumps({MARK: MARK_VALUE, "format": fmt})
    if SPECS[fmt].entries:
        with open(os.path.join(path, MARK_FILE), "w", encoding="utf-8") as f:
            f.write(record)
        return
    if fmt == "torch":  # read back by torch.export.load(path, extra_files={MARK_FILE: ""})
        with zipfile.ZipFile(path, "a") as archive:
            archive.writestr(f"{archive.namelist()[0].split('/')[0]}/extra/{MARK_FILE}", record)
        return
    if fmt == "litert":
        return
    import onnx

    proto = onnx.load(path, load_external_data=False)
    onnx.helper.set_model_props(proto, {**{p.key: p.value for p in proto.metadata_props}, MARK: MARK_VALUE})
    onnx.save(proto, path)


def is_export(fmt, path):
    """Whether `path` holds an earlier keras_vit export of `fmt` (which a new one may replace):
    one that `export` marked, not merely any file of that format."""
    spec = SPECS[fmt]
    if spec.entries:
        entries = set(os.listdir(path)) if os.path.isdir(path) else set()
        if not ({REQUIRED_ENTRY[fmt], MARK_FILE} <= entries <= spec.entries):
            return False
        try:
            with open(os.path.join(path, MARK_FILE), encoding="utf-8") as f:
                return json.load(f).get(MARK) == MARK_VALUE
        except (OSError, ValueError, AttributeError):
            return False
    if fmt == "torch":
        try:
            with zipfile.ZipFile(path) as archive:
                name = next(n for n in archive.namelist() if n.endswith(f"/extra/{MARK_FILE}"))
                return json.loads(archive.read(name)).get(MARK) == MARK_VALUE
        except (OSError, ValueError, StopIteration, AttributeError, zipfile.BadZipFile):
            return False
    if fmt == "litert" or not os.path.isfile(path) or not _installed("onnx"):
        return False
    import onnx
    from google.protobuf.message import DecodeError

    try:
        proto = onnx.load(path, load_external_data=False)
    except (DecodeError, OSError, ValueError):
        return False
    return any(p.key == MARK and p.value == MARK_VALUE for p in proto.metadata_props)


def output_path(fmt, output, several=False):
    """Where `fmt` is written for the output path `output`: with its ending when `several` formats
    share the path, or when the format needs it and `output` lacks it (`vit` -> `vit.pt2`)."""
    suffix = SPECS[fmt].suffix
    needed = several or (SPECS[fmt].suffix_needed and not output.endswith(suffix))
    return output + suffix if needed else output


def _is_tokenizer_copy(path):
    """Whether `path` is a folder of tokenizer files an earlier text tower export copied."""
    try:
        with open(os.path.join(path, MARK_FILE), encoding="utf-8") as f:
            return json.load(f).get(MARK) == MARK_VALUE
    except (OSError, ValueError, AttributeError):
        return False


def check_output(fmt, output, model_path=None, overwrite=False, tokenizer=False):
    """Raises OSError unless `output` may receive a `fmt` export (see `files.check_target`), and
    with a `tokenizer` its `tokenizer_path` folder; never the model file being exported, nor a
    folder holding it."""
    inputs = (model_path,) if model_path else ()
    folder = bool(SPECS[fmt].entries)
    check_target(output, overwrite=overwrite, folder=folder, replaceable=is_export(fmt, output), inputs=inputs)
    check_target(card_path(output), overwrite=overwrite, replaceable=is_card(card_path(output)), inputs=inputs)
    if tokenizer:
        copy = tokenizer_path(output)
        check_target(copy, overwrite=overwrite, folder=True, replaceable=_is_tokenizer_copy(copy), inputs=inputs)


def _copy_tokenizer(tokenizer, output):
    """Copies the files of `tokenizer` (`keras_vit.text.tokenizers.Tokenizer`) to `tokenizer_path(output)`; their names."""
    from keras_vit.text.tokenizers import FILES

    names = [name for name in FILES if os.path.isfile(os.path.join(tokenizer.folder, name))]
    with atomic_path(tokenizer_path(output)) as tmp:
        os.makedirs(tmp)
        for name in names:
            shutil.copyfile(os.path.join(tokenizer.folder, name), os.path.join(tmp, name))
        with open(os.path.join(tmp, MARK_FILE), "w", encoding="utf-8") as f:
            f.write(json.dumps({MARK: MARK_VALUE, "format": "tokenizer"}))
    return names


def _installed(name):
    module = sys.modules.get(name, False)
    return module is not None if module is not False else importlib.util.find_spec(name) is not None


def _keras_onnx_converter():
    """The converter Keras' own ONNX export uses on this backend, if installed."""
    name = {"tensorflow": "tf2onnx", "jax": "jax2onnx"}.get(keras.backend.backend())
    return name if name and _installed(name) else None


def check_requirements(fmt, verify_outputs=True):
    """Raises ImportError (one clear line) if this environment cannot write (and verify) `fmt`."""
    if fmt not in SPECS:
        raise ValueError(f"format={fmt!r}; expected one of {FORMATS}.")
    spec = SPECS[fmt]
    needed = ("onnx",) if fmt == "onnx" and _keras_onnx_converter() else spec.needs
    if verify_outputs:
        needed += spec.runtime
    missing = [name for name in needed if not _installed(name)]
    if missing:
        why = ""
        if "tensorflow" in missing and fmt in ("litert", "openvino"):
            why = (f"; keras_vit writes {fmt} from the TensorFlow backend, the only one whose export keeps "
                   "the input size dynamic (keras-team/keras#22996)")
        raise ImportError(
            f"Exporting to {fmt} needs the package(s) {', '.join(missing)}, which are not installed "
            f'(pip install "keras-vit[export]"){why}.'
        )


def check_quantize(fmt, quantize):
    """Raises ValueError (one line) unless a model quantized to `quantize` (None: not) exports as `fmt`."""
    if quantize is None or quantize in SPECS[fmt].quantize:
        return
    takes = ", ".join(SPECS[fmt].quantize) or "no quantized model"
    others = ", ".join(name for name, spec in SPECS.items() if quantize in spec.quantize) or "no format"
    raise ValueError(f"--quantize {quantize} cannot be exported as {fmt}: {fmt} takes {takes}; a {quantize} model "
                     f"exports as {others}.")


def _recorded(model, model_path):
    """`(evaluation crop, class names)` of the run that saved `model_path`, else the model's preprocessing crop."""
    from keras_vit.preprocessing import preprocessing

    if is_text_model(model):
        return None, None
    classes = metadata(model_path).get("classes", {}) if model_path else {}
    return classes.get("eval_crop", preprocessing(model).crop_fraction), classes.get("class_names")


def export(model, fmt, output, *, verify_outputs=True, atol=1e-4, overwrite=False, quantize=None, tokenizer=None,
           card_fields=None):
    """Writes `model` (a `keras.Model` or a `.keras` path) as `fmt` to `output`, and beside it
    `output.serving.json` (`serving_card`: the input's name, layout and preprocessing, how to
    call the runtime); returns the largest absolute difference found by `verify` (None when not
    verified). What is at `output` is replaced only by a complete, verified export, and only if
    it is an earlier export of `fmt` or `overwrite` is set. `quantize` ("int8", "float8",
    "int4") exports a quantized copy (see `keras_vit.inference.quantization`), verified against
    that copy. A text tower's `tokenizer` (`keras_vit.text.tokenizers.Tokenizer`) has its files
    copied to `OUTPUT.tokenizer/` and named in the card; `card_fields` replace the card's own
    (an image-text model's preprocessing and what its outputs hold)."""
    model_path = os.fspath(model) if isinstance(model, (str, os.PathLike)) else None
    check_requirements(fmt, verify_outputs)
    check_quantize(fmt, quantize)
    check_output(fmt, output, model_path, overwrite, tokenizer=tokenizer is not None)
    if model_path is not None:
        model = load_keras_file(model_path)
    crop, names = _recorded(model, model_path)
    record = {**card(model, fmt, output, crop_fraction=crop, class_names=names, naflex=is_naflex(model),
                    text=is_text_model(model)),
              **(card_fields or {})}
    if quantize is not None:
        from keras_vit.inference.quantization import quantized_copy

        model, model_path = quantized_copy(model, quantize), None
    error = None
    with atomic_path(output) as tmp:
        if not _write(model, fmt, tmp):
            with tempfile.TemporaryDirectory() as folder:
                if model_path is None:
                    model_path = os.path.join(folder, "model.keras")
                    model.save(model_path)
                _run_in_backend(SPECS[fmt].writers[0], fmt, model_path, tmp)
        _mark(fmt, tmp)
        if verify_outputs:
            try:
                error = verify(model, fmt, tmp, atol=atol)
            except ExportMismatch as mismatch:
                raise ExportMismatch(f"{mismatch} Nothing was written to {output}.") from None
    if tokenizer is not None:
        record["tokenizer"] = tokenizer.card(os.path.basename(tokenizer_path(output)), _copy_tokenizer(tokenizer, output))
    write_json(card_path(output), record)
    return error


def _by_name(inputs, name):
    """The NaFlex input whose name `name` (a runtime's, e.g. "serving_default_mask:0") holds."""
    return inputs[next(key for key in NAFLEX_INPUTS if key in name)]


def output_names(model):
    """The names of a model's outputs when it has several (EoMT's dict: `class_queries_logits`,
    `masks_queries_logits`), in the order the exports give them; None for one output."""
    return sorted(model.output) if isinstance(model.output, dict) else None


def by_name(outputs, like):
    """An export's `outputs` (one array, or several: a list, or a dict by the runtime's names) as
    the Keras model's outputs `like` are: one array, or a dict by output name. Several are paired
    by name where the runtime's name holds one, else by shape (EoMT's differ in rank), else in order."""
    if not isinstance(like, dict):
        return np.asarray(next(iter(outputs.values())) if isinstance(outputs, dict) else
                          outputs[0] if isinstance(outputs, (list, tuple)) else outputs)
    items = list(outputs.items()) if isinstance(outputs, dict) else [(str(i), v) for i, v in enumerate(outputs)]
    items, paired = [(k, np.asarray(v)) for k, v in items], {}
    for position, (name, value) in enumerate(sorted(like.items())):
        named = [v for k, v in items if name in k]
        shaped = [v for _, v in items if v.shape == np.shape(value)]
        paired[name] = (named or (shaped if len(shaped) == 1 else [items[position][1]]))[0]
    return paired


def run_exported(fmt, path, images, like=None):
    """Outputs of an exported model on `images` (NumPy), or on a NaFlex model's dict of inputs:
    the first output, or with `like` (the Keras model's outputs) all of them as `like` holds them
    (`by_name`)."""
    return by_name(_run_exported(fmt, path, images), like)


def _run_exported(fmt, path, images):
    """Every output of the export, as its runtime gives them."""
    named = isinstance(images, dict)
    if fmt == "saved_model":
        import tensorflow as tf

        loaded = tf.saved_model.load(path)  # kept referenced while `serve` runs
        outputs = loaded.serve(images)
        return {k: np.asarray(v) for k, v in outputs.items()} if isinstance(outputs, dict) else (
            [np.asarray(v) for v in outputs] if isinstance(outputs, (list, tuple)) else np.asarray(outputs))
    if fmt == "litert":
        from ai_edge_litert.interpreter import Interpreter

        interpreter = Interpreter(model_path=path)
        details = interpreter.get_input_details()
        values = [_by_name(images, d["name"]) if named else images for d in details]
        for detail, value in zip(details, values):
            interpreter.resize_tensor_input(detail["index"], value.shape)
        interpreter.allocate_tensors()
        for detail, value in zip(details, values):
            interpreter.set_tensor(detail["index"], value)
        interpreter.invoke()
        return {d["name"]: interpreter.get_tensor(d["index"]) for d in interpreter.get_output_details()}
    if fmt == "openvino":  # CPUs with bfloat16 units otherwise compute in bfloat16
        import openvino

        compiled = openvino.Core().compile_model(os.path.join(path, "model.xml"), "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
        results = compiled(dict(images) if named else images)
        return [np.asarray(results[output]) for output in compiled.outputs]
    if fmt == "torch":
        import torch

        tensors = {k: torch.from_numpy(v) for k, v in images.items()} if named else torch.from_numpy(images)
        with torch.no_grad():
            outputs = torch.export.load(path).module()(tensors)
        return {k: v.numpy() for k, v in outputs.items()} if isinstance(outputs, dict) else outputs.numpy()
    import onnxruntime

    session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
    outputs = session.run(None, {i.name: _by_name(images, i.name) if named else images for i in session.get_inputs()})
    return dict(zip((o.name for o in session.get_outputs()), outputs))


def keras_outputs(model, images):
    """The Keras model's outputs on `images` (NumPy). Under JAX one compiled call per input shape
    (`predict_on_batch`): an eager call compiles each operation again at every new shape, 2-5
    times slower for the few calls of a check."""
    outputs = model.predict_on_batch(images) if keras.backend.backend() == "jax" else model(images, training=False)
    if isinstance(outputs, dict):
        return {k: np.asarray(keras.ops.convert_to_numpy(v)) for k, v in outputs.items()}
    return np.asarray(keras.ops.convert_to_numpy(outputs))


def verify(model, fmt, path, *, atol=1e-4):
    """Max |exported - keras| on random inputs (`sample_inputs`); raises `ExportMismatch` above `atol`."""
    error = 0.0
    for images in sample_inputs(model):
        expected = keras_outputs(model, images)
        got = run_exported(fmt, path, images, like=expected)
        pairs = [(got[k], expected[k]) for k in sorted(expected)] if isinstance(expected, dict) else [(got, expected)]
        for ours, theirs in pairs:
            if ours.shape != theirs.shape:
                raise ExportMismatch(f"The {fmt} export outputs shape {ours.shape}, the model {theirs.shape}.")
            error = max(error, float(np.max(np.abs(ours - theirs))))
    if not error <= atol:
        raise ExportMismatch(f"The {fmt} export differs from the model by {error:.3g} (> {atol}).")
    return error


if __name__ == "__main__":  # used by `export` to convert in another backend's process
    fmt, source, target = sys.argv[1:4]
    if not _write(load_keras_file(source), fmt, target):
        sys.exit(f"the {keras.backend.backend()} backend cannot write {fmt}")
