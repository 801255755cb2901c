"""The key mapping of the hybrid R50+ViT-B/16's BiT ResNet stem between the checkpoint layouts.

Canonical (original npz) stem keys sit at top level: `conv_root/kernel` (7,7,3,64),
`gn_root/{scale,bias}` ((64,), or (1,1,1,64) in the 2020 files), `block{i}/unit{j}/conv{1,2,3}/kernel`, `.../gn{1,2,3}/{scale,bias}`,
and `conv_proj` / `gn_proj` on the first unit of a stage. timm (`vit_base_r50_s16_*`) names
them `patch_embed.backbone.stem.{conv,norm}`, `patch_embed.backbone.stages.{i-1}.blocks.{j-1}.
{conv,norm}{1,2,3}` and `.downsample.{conv,norm}`, with PyTorch `(out, in, kh, kw)` kernels.
In Keras the stem is the layer "stem" (`stem/conv_root/kernel`, `.../gn_root/gamma`, ...).

Kernels are stored raw in every layout: `WeightStandardizedConv2D` standardises them at run
time, as the original does. The original and timm standardise slightly differently (see
`keras_vit.layers.resnet`), so `R50ViTB16(weights=...)` builds its stem with the convention of
the checkpoint's source (`stem_numerics`).
"""

import re

VARIANT = "R50ViTB16"
STEM_NAME = "stem"
CANONICAL_PREFIXES = ("conv_root/", "gn_root/") + tuple(f"block{i}/" for i in range(1, 10))

_TIMM = "patch_embed.backbone."
_NORM_TO_TIMM = {"scale": "weight", "bias": "bias"}
_NORM_TO_KERAS = {"scale": "gamma", "bias": "beta"}


def _conv_to_hwio(array):
    return array.transpose(2, 3, 1, 0)


def _conv_to_oihw(array):
    return array.transpose(3, 2, 0, 1)


def _flat(array):
    """GroupNorm parameters: the 2020 files (old `flax.nn`) store them as (1, 1, 1, C)."""
    return array.reshape(array.shape[-1]) if len(array.shape) != 1 else array


def _swap(mapping):
    return {v: k for k, v in mapping.items()}


# Canonical <-> timm: (canonical regex, timm template) and back.
_CANONICAL_UNIT = re.compile(r"block(\d+)/unit(\d+)/(conv|gn)(1|2|3|_proj)/(kernel|scale|bias)\Z")
_CANONICAL_ROOT = re.compile(r"(conv|gn)_root/(kernel|scale|bias)\Z")
_TIMM_UNIT = re.compile(
    re.escape(_TIMM) + r"stages\.(\d+)\.blocks\.(\d+)\.(?:(conv|norm)(1|2|3)|downsample\.(conv|norm))\.(weight|bias)\Z"
)
_TIMM_ROOT = re.compile(re.escape(_TIMM) + r"stem\.(conv|norm)\.(weight|bias)\Z")


def timm_to_canonical(key):
    """timm key -> (canonical key, transform) for the stem's keys, else None."""
    root, unit = _TIMM_ROOT.match(key), _TIMM_UNIT.match(key)
    if root:
        kind, param = root.groups()
        prefix = "conv_root/" if kind == "conv" else "gn_root/"
    elif unit:
        stage, block, kind, index, proj_kind, param = unit.groups()
        kind, index = (proj_kind, "_proj") if proj_kind else (kind, index)
        prefix = f"block{int(stage) + 1}/unit{int(block) + 1}/{'conv' if kind == 'conv' else 'gn'}{index}/"
    else:
        return None
    if kind == "conv":
        return (prefix + "kernel", _conv_to_hwio) if param == "weight" else None
    return prefix + _swap(_NORM_TO_TIMM)[param], None


def canonical_to_timm(key):
    """Canonical stem key -> (timm key, transform), else None."""
    root, unit = _CANONICAL_ROOT.match(key), _CANONICAL_UNIT.match(key)
    if root:
        kind, param = root.groups()
        prefix = _TIMM + ("stem.conv." if kind == "conv" else "stem.norm.")
    elif unit:
        stage, block, kind, index, param = unit.groups()
        module = "downsample." + ("conv" if kind == "conv" else "norm") if index == "_proj" else (
            ("conv" if kind == "conv" else "norm") + index
        )
        prefix = f"{_TIMM}stages.{int(stage) - 1}.blocks.{int(block) - 1}.{module}."
    else:
        return None
    if kind == "conv":
        return (prefix + "weight", _conv_to_oihw) if param == "kernel" else None
    return prefix + _NORM_TO_TIMM[param], _flat


def _split_keras(key):
    if not key.startswith(STEM_NAME + "/"):
        return None
    *path, param = key[len(STEM_NAME) + 1 :].split("/")
    return "/".join(path), param


def keras_to_canonical(key):
    """Keras variable path of the stem -> (canonical key, None), else None."""
    parts = _split_keras(key)
    if parts is None:
        return None
    path, param = parts
    param = _swap(_NORM_TO_KERAS).get(param, param)
    canonical = f"{path}/{param}"
    return (canonical, None) if _CANONICAL_ROOT.match(canonical) or _CANONICAL_UNIT.match(canonical) else None


def canonical_to_keras(key):
    """Canonical stem key -> (Keras variable path, transform), else None."""
    if not (_CANONICAL_ROOT.match(key) or _CANONICAL_UNIT.match(key)):
        return None
    path, param = key.rsplit("/", 1)
    return f"{STEM_NAME}/{path}/{_NORM_TO_KERAS.get(param, param)}", None if param == "kernel" else _flat
