"""Per-layout clean-up before the rule tables apply: the variants each family has in the wild.

- original npz: an `opt/target/` or `params/` prefix, big_vision / Flax-linen module names,
  the scanned layout (one `encoderblock/` with a leading layer axis), a top-level
  `pos_embedding` without the class-token row;
- timm: a `pos_embed` without the class-token row (`no_embed_class`);
- Hugging Face: the `vit.` prefix, the renamed keys of transformers 5 state dicts, and
  `qkv_bias=False`.
"""

import math
import re

import numpy as np

from keras_vit.weights.layouts import POSEMB
from keras_vit.weights.lazy import LazyArray, concat

NPZ_PREFIXES = ("opt/target/", "params/img/", "params/")
LINEN_NAMES = {
    "MultiHeadDotProductAttention_0": "MultiHeadDotProductAttention_1",
    "LayerNorm_1": "LayerNorm_2",
    "MlpBlock_0": "MlpBlock_3",
}
HF_RENAMES = (
    (r"^layers\.(\d+)\.attention\.q_proj\.", r"encoder.layer.\1.attention.attention.query."),
    (r"^layers\.(\d+)\.attention\.k_proj\.", r"encoder.layer.\1.attention.attention.key."),
    (r"^layers\.(\d+)\.attention\.v_proj\.", r"encoder.layer.\1.attention.attention.value."),
    (r"^layers\.(\d+)\.attention\.o_proj\.", r"encoder.layer.\1.attention.output.dense."),
    (r"^layers\.(\d+)\.mlp\.fc1\.", r"encoder.layer.\1.intermediate.dense."),
    (r"^layers\.(\d+)\.mlp\.fc2\.", r"encoder.layer.\1.output.dense."),
    (r"^layers\.(\d+)\.", r"encoder.layer.\1."),
)


def detect_family(keys):
    """"original", "timm" or "hf" from the key names, or None."""
    keys = set(keys)
    if any(p + "embedding/kernel" in keys or p + "cls" in keys for p in ("", *NPZ_PREFIXES)):
        return "original"
    if any("embeddings.patch_embeddings" in k for k in keys):
        return "hf"
    if "patch_embed.proj.weight" in keys or any(k.startswith("blocks.") for k in keys):
        return "timm"
    return None


def _with_class_row(posemb):
    zeros = np.zeros((1, 1, posemb.shape[-1]), posemb.dtype)
    return concat([LazyArray.wrap(zeros, "class-token row"), posemb], axis=1, source=posemb.source)


def _is_square(n):
    return math.isqrt(n) ** 2 == n


def original(tensors, path):
    """Normalises the variants of the original npz layout to its canonical key names."""
    for prefix in NPZ_PREFIXES:
        if prefix + "embedding/kernel" in tensors or prefix + "cls" in tensors:
            tensors = {k[len(prefix):]: v for k, v in tensors.items() if k.startswith(prefix)}
            break
    tensors = dict(tensors)
    scanned = {k: tensors.pop(k) for k in list(tensors) if k.startswith("Transformer/encoderblock/")}
    for key, stacked in scanned.items():
        for i in range(stacked.shape[0]):
            tensors[key.replace("encoderblock/", f"encoderblock_{i}/", 1)] = stacked[i]
    if any("/MultiHeadDotProductAttention_0/" in k for k in tensors if k.startswith("Transformer/encoderblock_")):
        tensors = {
            "/".join(LINEN_NAMES.get(p, p) for p in k.split("/")) if k.startswith("Transformer/encoderblock_") else k: v
            for k, v in tensors.items()
        }
    if "pos_embedding" in tensors:
        if "cls" not in tensors:
            raise ValueError(
                f"{path}: a big_vision checkpoint without a class token (global-average or MAP "
                "pooling); keras_vit's ViT has a class token, so it cannot hold these weights."
            )
        tensors[POSEMB] = _with_class_row(tensors.pop("pos_embedding"))
    return tensors


def timm(tensors, path):
    """Adds the class-token row to a `no_embed_class` position embedding."""
    tensors = dict(tensors)
    posemb = tensors.get("pos_embed")
    if posemb is not None and "cls_token" in tensors and _is_square(posemb.shape[1]):
        tensors["pos_embed"] = _with_class_row(posemb)
    return tensors


def hf(tensors, path, config):
    """Strips the `vit.` prefix, maps transformers-5 names to the saved ones, fills zero
    q/k/v biases for `qkv_bias=False`."""
    model_type = config.get("model_type", "vit")
    if model_type != "vit":
        raise ValueError(
            f"{path}: a Hugging Face {model_type!r} model; keras_vit loads model_type 'vit' "
            "(ViTModel, ViTForImageClassification)."
        )
    out = {}
    for key, value in tensors.items():
        key = key[len("vit."):] if key.startswith("vit.") else key
        for pattern, replacement in HF_RENAMES:
            key, count = re.subn(pattern, replacement, key)
            if count:
                break
        out[key] = value
    if config.get("qkv_bias") is False:
        for key in [k for k in out if re.match(r"encoder\.layer\.\d+\.attention\.attention\.\w+\.weight$", k)]:
            width = out[key].shape[0]
            out[key[: -len("weight")] + "bias"] = LazyArray.wrap(np.zeros(width, np.float32), "qkv_bias=False")
    return out
