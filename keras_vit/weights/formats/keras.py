"""keras_vit's own files, `.weights.h5` and `.keras`, keyed by the variable paths of its
models (the table of `keras_vit.weights.variables`). A `.keras` file records the head count,
GELU and LayerNorm epsilon in its config; a `.weights.h5` file stores a layer's variables by
position only, named here by the layer's role. Written by building the model (Keras is
imported then)."""

import re

from keras_vit.utils.files import atomic_path
from keras_vit.weights.canonical import Metadata
from keras_vit.weights.formats.base import (AIMV2_OPTIONS, BLOCK_OPTIONS, CLIP_OPTIONS, EVA_CLIP_OPTIONS, HEAD_OPTIONS,
                                            PE_OPTIONS, Format)
from keras_vit.weights.variables import NORM_VARIABLES, TABLE
from keras_vit.config.vit_config import ROPE_THETA

# The variable names of a layer, in storage order, by the layer's name.
VARIABLES = {"class_token": ("cls",), "posembed_input": ("pos_embedding",), "ln_1": NORM_VARIABLES,
             "ln_2": NORM_VARIABLES, "encoder_norm": NORM_VARIABLES, "ls_1": ("gamma",), "ls_2": ("gamma",),
             "attention": ("rope_frequencies",), "embedding_norm": NORM_VARIABLES,
             "map_head": ("probe",), "ln": NORM_VARIABLES, "registers": ("tokens",),
             "norm": NORM_VARIABLES, "fc_norm": NORM_VARIABLES, "pre_norm": NORM_VARIABLES,
             "q_norm": NORM_VARIABLES, "k_norm": NORM_VARIABLES, "out_norm": NORM_VARIABLES}
_STORED = re.compile(r"(?P<layer>.*?)(?P<name>[^/]+)/vars/(?P<position>\d+)\Z")


def detect(raw):
    """keras_vit's variable paths: its patch embedding and encoder blocks (KerasHub's differ)."""
    return (raw.container in ("keras", "keras_h5") and "embedding/vars/0" in raw.tensors
            and any(key.startswith("encoder/encoderblock_0/") for key in raw.tensors))


def _variable_name(layer, position):
    """A stored variable's name from its layer's name (the hybrid stem's GroupNorms are
    `gn_root`, `gn1`..`gn3`, `gn_proj`) and position."""
    names = NORM_VARIABLES if layer.startswith("gn") else VARIABLES.get(layer, ("kernel", "bias"))
    return names[position] if position < len(names) else f"variable_{position}"


def prepare(raw):
    """Variable paths of the stored `layers.../vars/<position>` keys."""
    out = {}
    for key, value in raw.tensors.items():
        found = _STORED.match(key)
        out[found["layer"] + found["name"] + "/" + _variable_name(found["name"], int(found["position"]))] = value
    return out


def _layer_config(config, class_name):
    layers = config.get("config", {}).get("layers", []) if isinstance(config, dict) else []
    return next((layer["config"] for layer in layers if layer.get("class_name") == class_name), {})


def _preprocessing(config):
    """The scaling the saved model records (`model.preprocessing`), None where it records none."""
    found = config.get("config", {}).get("preprocessing") if isinstance(config, dict) else None
    return found if isinstance(found, str) else None


def _grid(config):
    """The patch grid of the model's fixed input size or NaFlex position table, or None (any
    size, a stem)."""
    naflex = _layer_config(config, "NaFlexPositionEmbedding").get("grid_size")
    if naflex:
        return tuple(naflex)
    if _layer_config(config, "ResNetV2Stem"):
        return None  # the table's size gives the grid
    patch = _layer_config(config, "PatchEmbedding").get("patch_size")
    shape = _layer_config(config, "InputLayer").get("batch_shape") or ()
    sides = list(shape[1:3])
    if not isinstance(patch, int) or len(sides) != 2 or not all(isinstance(n, int) and n > 0 for n in sides):
        return None
    return sides[0] // patch, sides[1] // patch


def metadata(raw, tensors):
    encoder = _layer_config(raw.meta.get("config"), "Encoder")
    rope = bool(_layer_config(raw.meta.get("config"), "RopePositionEmbedding"))
    naflex = bool(_layer_config(raw.meta.get("config"), "NaFlexPositionEmbedding"))
    return Metadata(
        grid=_grid(raw.meta.get("config")),
        naflex=naflex or None,
        rope_theta=encoder.get("rope_theta", ROPE_THETA) if rope else None,
        rope_form=encoder.get("rope_form") if rope else None,
        rope_indexing=_layer_config(raw.meta.get("config"), "RopePositionEmbedding").get("indexing"),
        rope_reference_grid=_layer_config(raw.meta.get("config"), "RopePositionEmbedding").get("reference_grid"),
        rope_offset=_layer_config(raw.meta.get("config"), "RopePositionEmbedding").get("index_offset"),
        map_heads=_layer_config(raw.meta.get("config"), "MAPHead").get("num_heads"),
        key_bias=encoder.get("key_bias"),
        approximate_gelu=encoder.get("approximate_gelu"),
        quick_gelu=encoder.get("quick_gelu"),
        unit_features=bool(_layer_config(raw.meta.get("config"), "UnitNormalization")) or None,
        num_heads=encoder.get("num_heads"),
        layer_norm_epsilon=encoder.get("layer_norm_epsilon"),
        pooling=_layer_config(raw.meta.get("config"), "TokenPooling").get("mode"),
        interpolation=_layer_config(raw.meta.get("config"), "PositionEmbedding").get("interpolation"),
        sincos_form=_layer_config(raw.meta.get("config"), "SinCosPositionEmbedding").get("form"),
        preprocessing=_preprocessing(raw.meta.get("config")),
    )


def write(path, ckpt):
    """A `.keras` model or `.weights.h5` file of the model that holds `ckpt`."""
    from keras_vit.model.architecture import ViTConfig
    from keras_vit.weights.building import build_from_checkpoint

    if ckpt.stem is not None:
        raise ValueError(
            f"{ckpt.path} has a {ckpt.stem.name} stem: build the hybrid model with weights=... "
            "and save it with model.save() instead."
        )
    config = ViTConfig(
        **ckpt.architecture(), include_top=ckpt.classes is not None, classes=ckpt.classes or 1000, pooling=ckpt.pooling
    )
    model = build_from_checkpoint(config, ckpt)
    with atomic_path(path) as tmp:
        if path.endswith(".weights.h5"):
            model.save_weights(tmp)
        else:
            model.save(tmp)


FORMAT = Format(
    name="keras",
    table=TABLE,
    detect=detect,
    prepare=prepare,
    metadata=metadata,
    write=write,
    suffixes=(".keras", ".weights.h5"),
    block_options=BLOCK_OPTIONS + AIMV2_OPTIONS + CLIP_OPTIONS + EVA_CLIP_OPTIONS + PE_OPTIONS + HEAD_OPTIONS,
)
