"""KerasHub's ViT (`keras_hub.models.ViTBackbone`, `ViTImageClassifier`): a preset folder
(`save_to_preset`), a `.weights.h5` (`save_weights`) or a `.keras` file; and preset folders
that `from_preset` loads, written without keras-hub.

Keys are the names of the Keras layers holding a variable, then `vars/<position>` (e.g.
`vit_encoder/transformer_block_1/mha/query/vars/0`); keras-hub's attention kernels are
`(D, heads, D // heads)` like the canonical ones. Its MLP runs the exact GELU. A preset's
`config.json` records heads, LayerNorm epsilon and resolution, its `task.json` the head's
pooling; a bare `.weights.h5` records neither (heads then come from the builder, as for timm
files, and a head is taken to read the class token, keras-hub's default).

The export writes `config.json`, `metadata.json`, the image converter (resize to the model's
resolution, then `preprocess_input`'s scaling: the model's preprocessing) and `model.weights.h5`, plus for a
model with a head `task.json`, `preprocessor.json` and `task.weights.h5` (logits, class-token
pooling). The `.weights.h5` files are written with h5py under the group paths Keras derives
from keras-hub's attribute and class names (`_h5_group`).
"""

import datetime
import os

import h5py
import numpy as np

from keras_vit.utils.files import atomic_path, write_json
from keras_vit.preprocessing import preprocessing
from keras_vit.variants import LAYER_NORM_EPSILON
from keras_vit.weights import containers
from keras_vit.weights.canonical import ATTN, BLOCK, MLP, POSEMB, QKV, Metadata
from keras_vit.weights.formats.base import Format
from keras_vit.weights.formats.common import config_pair
from keras_vit.weights.lazy import LazyArray
from keras_vit.weights.table import Row, Table, pairs

EMBED = "vit_patching_and_embedding/"
ENCODER = "vit_encoder/"
HUB_BLOCK = ENCODER + "transformer_block_{i+1}/"
LAYERS = ("vit_patching_and_embedding", "vit_encoder", "pre_logits", "predictions")
HEAD_LAYERS = ("pre_logits", "predictions")


def layer_rows(canonical, theirs, names=("kernel", "bias"), optional=False):
    """The rows of one Keras layer: canonical `canonical + name` <-> `theirs + vars/<position>`."""
    return pairs(*((canonical + n, f"{theirs}vars/{j}") for j, n in enumerate(names)), optional=optional)


def posemb_to_canonical(arrays, heads):
    return [arrays[0].reshape(1, *arrays[0].shape)]


def posemb_from_canonical(arrays, heads):
    return [arrays[0].reshape(*arrays[0].shape[1:])]


TABLE = Table(
    layer_rows("embedding/", EMBED + "patch_embedding/")
    + pairs(("cls", EMBED + "vars/0"))
    + (Row(POSEMB, EMBED + "position_embedding/vars/0", posemb_to_canonical, posemb_from_canonical),)
    + layer_rows(BLOCK + "LayerNorm_0/", HUB_BLOCK + "ln_1/", ("scale", "bias"))
    + sum((layer_rows(ATTN + f"{n}/", HUB_BLOCK + f"mha/{n}/") for n in QKV), ())
    + layer_rows(ATTN + "out/", HUB_BLOCK + "mha/attention_output/")
    + layer_rows(BLOCK + "LayerNorm_2/", HUB_BLOCK + "ln_2/", ("scale", "bias"))
    + layer_rows(MLP + "Dense_0/", HUB_BLOCK + "mlp/dense_1/")
    + layer_rows(MLP + "Dense_1/", HUB_BLOCK + "mlp/dense_2/")
    + layer_rows("Transformer/encoder_norm/", ENCODER + "ln/", ("scale", "bias"))
    + layer_rows("pre_logits/", "pre_logits/", optional=True)
    + layer_rows("head/", "predictions/", optional=True)
)

# The layers whose bias a `use_*_bias=False` model leaves out, by its config flag.
_BIASES = {
    "use_patch_bias": (EMBED + "patch_embedding/",),
    "use_mha_bias": tuple(f"/mha/{n}/" for n in (*QKV, "attention_output")),
    "use_mlp_bias": ("/mlp/dense_1/", "/mlp/dense_2/"),
}


def _strip(key, folder):
    """`key` without its file name (in a preset folder) and the backbone's name (in a
    classifier's own file)."""
    if folder:
        key = key.split("/", 1)[1]
    first, _, rest = key.partition("/")
    return rest if first not in LAYERS and rest.split("/", 1)[0] in LAYERS[:2] else key


def detect(raw):
    return raw.container in ("keras_h5", "keras") and any(
        k.endswith(EMBED + "patch_embedding/vars/0") for k in raw.tensors
    )


def _object(value, what, path):
    """`value` if it is a JSON object (a dict), else a one-line ValueError naming `what`."""
    if not isinstance(value, dict):
        raise ValueError(f"{path}: {what} is a {type(value).__name__}, not a JSON object ({{...}}).")
    return value


def preset_configs(raw):
    """`(backbone config, task config)` of what `raw` records (empty dicts where nothing),
    each checked to be a JSON object."""
    config = _object(raw.meta.get("config") or {}, "config.json", raw.path)
    task = {}
    if os.path.lexists(os.path.join(raw.path, "task.json")):  # a preset folder's
        task = containers.read_json(os.path.join(raw.path, "task.json"))
    if str(config.get("registered_name")).endswith("ImageClassifier"):  # a classifier's `.keras` file
        config, task = _object(config.get("config"), "the classifier's config", raw.path).get("backbone") or {}, config
    backbone = _object(_object(config, "the backbone's config", raw.path).get("config", {}), "the backbone's config", raw.path)
    return backbone, _object(task.get("config", {}), "task.json's config", raw.path)


def check_classes(raw, task, head):
    """Raises ValueError (one line) unless the head kernel `head` (None: the preset has none)
    gives the class count the task config declares (if it declares one)."""
    classes = task.get("num_classes")
    if classes is not None and (isinstance(classes, bool) or not isinstance(classes, int) or classes < 1):
        raise ValueError(f"{raw.path}: task.json's num_classes={classes!r}; expected a whole number >= 1.")
    if classes is not None and (head is None or head.shape[-1:] != (classes,)):
        found = "no head weights (task.weights.h5 missing)" if head is None else f"a head of shape {head.shape}"
        raise ValueError(f"{raw.path}: task.json declares a classifier of {classes!r} classes, but the preset has {found}.")


def prepare(raw):
    """The ViT's own variables (a classifier's backbone prefix dropped), with zero biases where
    the config leaves them out; refuses what keras_vit's ViT cannot hold."""
    backbone, task = preset_configs(raw)
    if backbone.get("use_class_token") is False or (
        not any(k.endswith(EMBED + "vars/0") for k in raw.tensors)
        and any(k.endswith(EMBED + "position_embedding/vars/0") for k in raw.tensors)
    ):
        raise ValueError(
            f"{raw.path}: a KerasHub ViT without class token (use_class_token=False); keras_vit's ViT "
            "has one, so it cannot hold these weights."
        )
    if task.get("pooling", "token") != "token":
        raise ValueError(
            f"{raw.path}: a KerasHub ViTImageClassifier with pooling={task['pooling']!r} (the mean of all "
            "tokens, class token included); keras_vit's head reads the class token (pooling='token')."
        )
    tensors = {_strip(key, os.path.isdir(raw.path)): value for key, value in raw.tensors.items()}
    check_classes(raw, task, tensors.get("predictions/vars/0"))
    for flag, layers in _BIASES.items():
        if backbone.get(flag) is False:
            kernels = [k for k in tensors if k.endswith("/vars/0") and any(layer in k for layer in layers)]
            for key in [k for k in kernels if k[: -len("0")] + "1" not in tensors]:
                kernel = tensors[key]  # q / k / v biases are per head: (heads, D // heads)
                shape = kernel.shape[1:] if "/mha/" in key and "attention_output" not in key else kernel.shape[-1:]
                tensors[key[: -len("0")] + "1"] = LazyArray.wrap(np.zeros(shape, np.float32), f"{flag}=False")
    return tensors


def metadata(raw, tensors):
    backbone, _ = preset_configs(raw)
    grid = None
    if "image_shape" in backbone and "patch_size" in backbone:
        patch = config_pair(backbone["patch_size"], "patch_size", raw.path)
        image = config_pair(backbone["image_shape"], "image_shape", raw.path, length=3)
        grid = tuple(s // p for s, p in zip(image, patch))
    return Metadata(
        approximate_gelu=False,
        num_heads=backbone.get("num_heads"),
        grid=grid,
        layer_norm_epsilon=backbone.get("layer_norm_epsilon"),
        pooling="token" if "predictions/vars/0" in tensors else None,  # `prepare` refuses other heads
        depth=backbone.get("num_layers"),
    )


# ------------------------------------------------------------------------------ export

# Group paths of a keras-hub ViT's layers in its `.weights.h5` files, by layer name: Keras names
# them after the attributes and classes holding them, not after the layers' own names.
H5_GROUPS = {
    "vit_patching_and_embedding": "layers/vi_t_patching_and_embedding",
    "vit_encoder": "layers/vi_t_encoder",
    "ln_1": "layer_norm_1",
    "ln_2": "layer_norm_2",
    "query": "query_dense",
    "key": "key_dense",
    "value": "value_dense",
    "attention_output": "output_dense",
    "ln": "layer_norm",
}


def _h5_group(layer, has_pre_logits):
    """The group path of a layer (its names, outermost first) in a keras-hub ViT's file."""
    if layer[0] in HEAD_LAYERS:  # in task.weights.h5, named after the head's Dense layers
        return "layers/dense_1" if layer[0] == "predictions" and has_pre_logits else "layers/dense"
    parts = []
    for name in layer:
        if name.startswith("transformer_block_"):
            index = int(name.rsplit("_", 1)[1]) - 1
            parts.append("encoder_layers/vi_t_encoder_block" + (f"_{index}" if index else ""))
        else:
            parts.append(H5_GROUPS.get(name, name))
    return "/".join(parts)


def _write_weights_h5(path, tensors, has_pre_logits):
    """`tensors` (key `layer/.../vars/<position>` -> LazyArray) as a Keras `.weights.h5`; each
    layer's `vars` group records the layer's name, as Keras writes it."""
    with h5py.File(path, "w") as f:
        for key, tensor in tensors.items():
            layer, position = key.split("/vars/")
            layer = layer.split("/")
            for depth in range(1, len(layer) + 1):
                group = f.require_group(_h5_group(layer[:depth], has_pre_logits) + "/vars")
                group.attrs["name"] = layer[depth - 1]
            group.create_dataset(position, data=np.asarray(tensor.load(), np.float32))


def _serialized(module, name, config):
    return {
        "module": f"keras_hub.src.models.vit.{module}",
        "class_name": name,
        "config": {
            "name": "vi_t_" + module[len("vit_"):],
            "trainable": True,
            "dtype": {"module": "keras", "class_name": "DTypePolicy", "config": {"name": "float32"}, "registered_name": None},
            **config,
        },
        "registered_name": f"keras_hub>{name}",
    }


def _backbone_config(ckpt):
    grid = ckpt.patch_grid
    return _serialized("vit_backbone", "ViTBackbone", {
        "image_shape": [grid[0] * ckpt.patch_size, grid[1] * ckpt.patch_size, ckpt.channels],
        "patch_size": [ckpt.patch_size, ckpt.patch_size],
        "num_layers": ckpt.depth,
        "num_heads": ckpt.num_heads,
        "hidden_dim": ckpt.hidden_dim,
        "mlp_dim": ckpt.mlp_dim,
        "dropout_rate": 0.0,
        "attention_dropout": 0.0,
        "layer_norm_epsilon": ckpt.layer_norm_epsilon or LAYER_NORM_EPSILON,
        "use_mha_bias": True,
        "use_mlp_bias": True,
        "use_class_token": True,
        "use_patch_bias": True,
    })


def _image_converter(ckpt):
    """keras-hub's `ViTImageConverter`: resize (centre crop to the aspect ratio, as keras_vit's
    `predict`) to the model's resolution with its preprocessing's interpolation, then
    `x * scale + offset` per channel: `preprocess_input`'s `(x / 255 - mean) / std`."""
    spec, grid = preprocessing(ckpt.preprocessing), ckpt.patch_grid
    return _serialized("vit_image_converter", "ViTImageConverter", {
        "image_size": [grid[0] * ckpt.patch_size, grid[1] * ckpt.patch_size],
        "scale": [1 / s for s in spec.scale],
        "offset": [-m / s for m, s in zip(spec.mean, spec.std)],
        "interpolation": spec.interpolation,
        "antialias": False,
        "crop_to_aspect_ratio": True,
        "pad_to_aspect_ratio": False,
        "bounding_box_format": "yxyx",
    })


def _check_exportable(ckpt):
    ckpt.require_class_token_head("kerashub")
    problem = None
    if ckpt.stem is not None:
        problem = f"it has a {ckpt.stem.name} stem; KerasHub's ViT has no hybrid stem"
    elif ckpt.approximate_gelu:
        problem = (
            "it runs the tanh-approximate GELU and KerasHub's ViT the exact one; build the model with "
            "approximate_gelu=False (as timm runs these weights) and export that"
        )
    elif ckpt.representation_size and not ckpt.classes:
        problem = "KerasHub's ViTBackbone has no pre_logits layer (only a ViTImageClassifier, under a head)"
    if problem:
        raise ValueError(f"Cannot export {ckpt.path} as a KerasHub preset: {problem}.")



def write(folder, ckpt):
    """A KerasHub preset folder of `ckpt`: a ViTImageClassifier (logits) with a head, else a
    ViTBackbone; written whole and swapped in when complete."""
    _check_exportable(ckpt)
    theirs = FORMAT.from_canonical(ckpt.tensors, ckpt.num_heads, f"export of {ckpt.path} to kerashub")
    head = {k: v for k, v in theirs.items() if k.split("/", 1)[0] in HEAD_LAYERS}
    backbone = {k: v for k, v in theirs.items() if k not in head}
    has_pre_logits = ckpt.representation_size is not None
    backbone_config, converter = _backbone_config(ckpt), _image_converter(ckpt)
    with atomic_path(folder) as tmp:
        os.makedirs(tmp)
        _write_weights_h5(os.path.join(tmp, "model.weights.h5"), backbone, has_pre_logits)
        write_json(os.path.join(tmp, "config.json"), backbone_config)
        write_json(os.path.join(tmp, "image_converter.json"), converter)
        write_json(os.path.join(tmp, "metadata.json"), {
            "parameter_count": int(sum(np.prod(t.shape) for t in backbone.values())),
            "date_saved": datetime.datetime.now().strftime("%Y-%m-%d@%H:%M:%S"),
            "tasks": ["ImageClassifier"],
            "written_by": "keras_vit",
        })
        if head:
            _write_weights_h5(os.path.join(tmp, "task.weights.h5"), head, has_pre_logits)
            preprocessor = _serialized("vit_image_classifier_preprocessor", "ViTImageClassifierPreprocessor", {
                "image_converter": converter, "config_file": "preprocessor.json",
            })
            write_json(os.path.join(tmp, "preprocessor.json"), preprocessor)
            write_json(os.path.join(tmp, "task.json"), _serialized("vit_image_classifier", "ViTImageClassifier", {
                "backbone": backbone_config,
                "preprocessor": preprocessor,
                "num_classes": ckpt.classes,
                "pooling": "token",
                "activation": None,
                "dropout": 0.0,
                "intermediate_dim": ckpt.representation_size,
            }))


FORMAT = Format(
    name="kerashub",
    table=TABLE,
    detect=detect,
    prepare=prepare,
    metadata=metadata,
    write=write,
    folder=True,
    interpolation="bicubic",  # keras-hub's ViT does not resize; its presets are transformers' weights
)
