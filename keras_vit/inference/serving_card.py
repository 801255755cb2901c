"""How to call an export: `NAME.serving.json` written beside every serving export.

An exported graph holds the model only: the resize, crop and scaling of its input stay the
caller's. The card says what `keras-vit predict` does before the model (the same steps as
`keras_vit.inference.predict.load_images`), the input's name, layout and size, what the output
holds, and how the export's runtime is called, so a serving stack without keras_vit feeds it
the same numbers.
"""

import os

from keras_vit.utils.files import parse_json
from keras_vit.model.logits import ends_with_softmax
from keras_vit.inspect.model_parts import dense_task, input_step
from keras_vit.preprocessing import preprocessing

SUFFIX = ".serving.json"
MARK, MARK_VALUE = "written_by", "keras_vit"

# How each format's runtime is called with a float32 NHWC batch `x` (a text tower's: int32 token ids)
# (`serving.run_exported`).
CALLS = {
    "saved_model": "tf.saved_model.load(PATH).serve(x)",
    "onnx": "onnxruntime.InferenceSession(PATH).run(None, {INPUT: x})[0]",
    "litert": "Interpreter(model_path=PATH): resize_tensor_input(input index, x.shape), allocate_tensors(), "
              "set_tensor, invoke(), get_tensor(output index)",
    "openvino": 'openvino.Core().compile_model(PATH + "/model.xml", "CPU", {"INFERENCE_PRECISION_HINT": "f32"})(x)[0]',
    "torch": "torch.export.load(PATH).module()(torch.from_numpy(x))",
}
# What a dense model's outputs hold (`keras_vit.dense`), by `dense_task`.
DENSE_OUTPUTS = {
    "semantic": "per-pixel class logits (batch, height, width, classes) at the input's size: the class map is their "
                "argmax over the last axis",
    "depth": "a depth map (batch, height, width) at the input's size (relative depth, or metric in the units of "
             "max_depth)",
    "eomt": "EoMT's per-query outputs by name: class_queries_logits (batch, queries, classes + 1; the last 'no "
            "object') and masks_queries_logits (batch, queries, 4 x the patch grid); the class map is "
            "keras_vit.dense.post_process_semantic_segmentation: softmax(class logits) without 'no object' times "
            "sigmoid(mask logits) resized (bilinear) to the input size, summed over the queries, resized to the "
            "image's size, argmax",
}
NAFLEX_CALL = ("the three inputs by name, {'patches', 'spatial_shapes', 'mask'} (keras_vit.naflex_inputs makes them): "
               "one dict for the SavedModel's serve and the PyTorch program, three named inputs for ONNX, LiteRT and "
               "OpenVINO")


def card_path(output):
    """Where the card of the export at `output` goes: beside it, `output` + ".serving.json"."""
    return os.fspath(output).rstrip(os.sep) + SUFFIX


def tokenizer_path(output):
    """Where a text tower export's tokenizer files go: beside it, the folder `output` + ".tokenizer"."""
    return os.fspath(output).rstrip(os.sep) + ".tokenizer"


def is_card(path):
    """Whether `path` is a card keras_vit wrote (an earlier export's, which a new one may replace)."""
    try:
        with open(path, encoding="utf-8") as f:
            record = parse_json(f.read(1 << 20))
    except (OSError, ValueError, UnicodeDecodeError):
        return False
    return isinstance(record, dict) and record.get(MARK) == MARK_VALUE


def _steps(model, size, crop_fraction):
    spec = preprocessing(model)
    resize = round(size / crop_fraction) if size else None
    return {
        "name": getattr(model, "preprocessing", None) or "vit",
        "steps": [
            "decode to RGB, uint8 (height, width, 3)",
            (f"resize the shorter side to {resize} px ({spec.interpolation})" if size else
             f"resize ({spec.interpolation}) so that both sides are multiples of the patch size"),
            f"take the central {size} x {size} square" if size else "no crop",
            "x = (pixels / 255 - mean) / std, float32",
            "stack the images as (batch, height, width, 3): channels last",
        ],
        "mean": list(spec.mean),
        "std": list(spec.std),
        "interpolation": spec.interpolation,
        "crop_fraction": crop_fraction,
        "image_size": size,
    }


def card(model, fmt, output, *, crop_fraction=1.0, class_names=None, naflex=False, text=False):
    """The card of `model` exported as `fmt` at `output` (a dict, see the module docstring); of a
    `text` tower: its token-id input, `tokenizer` filled in by the export."""
    shape = list(model.inputs[0].shape[1:])
    if text:  # token ids in (batch, context) rows
        return {MARK: MARK_VALUE, "format": fmt, "file": os.path.basename(os.fspath(output).rstrip(os.sep)),
                "call": CALLS[fmt].replace("PATH", "path"),
                "input": {"name": model.inputs[0].name, "shape": [None, *shape], "dtype": "int32",
                          "layout": "(batch, context): one row of token ids per text (see tokenizer)",
                          "dynamic": ["batch"]},
                "output": {"shape": [None, *model.output_shape[1:]], "holds": "text features (not normalised)"},
                "preprocessing": None, "tokenizer": None}
    size = shape[0] if not naflex and shape[0] is not None and shape[0] == shape[1] else None
    record = {
        MARK: MARK_VALUE,
        "format": fmt,
        "file": os.path.basename(os.fspath(output).rstrip(os.sep)),
        "call": CALLS[fmt].replace("PATH", "path"),
        "input": ({"names": ["patches", "spatial_shapes", "mask"], "how": NAFLEX_CALL} if naflex else
                  {"name": model.inputs[0].name, "shape": [None, *shape], "dtype": "float32",
                   "layout": "NHWC: (batch, height, width, RGB)", "dynamic": [
                       axis for axis, n in zip(("batch", "height", "width"), [None, *shape]) if n is None]}),
        "output": _output(model),
        "preprocessing": None if naflex else _steps(model, size, crop_fraction),
    }
    if dense_task(model) is not None:
        record["preprocessing"]["steps"][1:3] = [_dense_resize(model, shape), "no crop: the whole image"]
        if None in shape[:2]:
            record["input"]["multiple_of"] = input_step(model)
    if class_names:
        record["class_names"] = list(class_names)
    return record


def _dense_resize(model, shape):
    spec = preprocessing(model)
    if None not in shape[:2]:
        return f"resize the whole image to {shape[0]} x {shape[1]} px ({spec.interpolation}); resize the output back"
    return (f"resize the whole image ({spec.interpolation}) so that both sides are multiples of "
            f"{input_step(model)} (e.g. the nearest); resize the output back to the image's size")


def _output(model):
    """What the output holds: a classifier's probabilities or logits, a dense model's maps."""
    task = dense_task(model)
    if task == "eomt":
        return {"names": sorted(model.output), "shapes": {k: [None, *v.shape[1:]] for k, v in sorted(model.output.items())},
                "holds": DENSE_OUTPUTS[task]}
    shape = [None, *model.output_shape[1:]]
    if task is not None:
        return {"shape": shape, "holds": DENSE_OUTPUTS[task]}
    return {"shape": shape, "holds": "probabilities (softmax)" if ends_with_softmax(model) else "logits"}
