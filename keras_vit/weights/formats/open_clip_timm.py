"""OpenCLIP's timm image towers (`open_clip.timm_model.TimmModel`: `vision_cfg.timm_model_name`, as
the SigLIP and SigLIP 2 models of `timm/ViT-*-SigLIP*` on the hub): `visual.trunk.*` are the keys of
the timm model (`vit_base_patch16_siglip_224`, ...), read as `formats.timm` reads them; the text
tower's keys are left out. Read only.

`open_clip_config.json`'s `model_cfg.vision_cfg` says how the trunk is pooled (`timm_pool`: "map"
its attention pool, "token", "avg") and projected (`timm_proj`: "none", or "linear" without bias:
`visual.head.proj.weight`, keras_vit's `projection_dim`); its `timm_model_kwargs.num_heads` the
head count (else that of the named models of the width). timm runs these towers with its exact
GELU, LayerNorm epsilon 1e-6."""

import dataclasses

from keras_vit.preprocessing import HALF
from keras_vit.weights.canonical import Metadata
from keras_vit.weights.formats import eva, timm
from keras_vit.weights.formats.base import Format

PREFIX, HEAD = "visual.trunk.", "visual.head."
POOLS = {"map": None, "token": "token", "avg": "avg"}  # timm_pool -> Metadata.pooling (None: its MAP keys say)
PROJECTIONS = ("none", "linear")


def detect(raw):
    return PREFIX + "patch_embed.proj.weight" in raw.tensors


def _vision_cfg(raw):
    """`(timm_pool, timm_proj, heads)` of the `open_clip_config.json`; others than keras_vit reads refused."""
    vision, heads = eva.open_clip_vision(raw)
    pool, proj = vision.get("timm_pool", "avg"), vision.get("timm_proj", "linear")
    proj = "none" if proj == "" else proj
    if not isinstance(pool, str) or pool not in POOLS or proj not in PROJECTIONS or vision.get("timm_proj_bias"):
        raise ValueError(f"{raw.path}: an OpenCLIP timm image tower with timm_pool={pool!r}, timm_proj={proj!r}, "
                         f"timm_proj_bias={vision.get('timm_proj_bias')!r}; keras_vit reads timm_pool {' / '.join(POOLS)} "
                         "and timm_proj 'none' or a bias-free 'linear'.")
    return pool, proj, heads


def prepare(raw):
    """The trunk's keys without `visual.trunk.`, the `linear` projection as timm's CLIP projection."""
    _, proj, _ = _vision_cfg(raw)
    extra = sorted(k for k in raw.tensors if k.startswith(HEAD) and k != HEAD + "proj.weight")
    if extra or (proj == "none" and HEAD + "proj.weight" in raw.tensors):
        raise ValueError(f"{raw.path}: OpenCLIP image head keys {extra or [HEAD + 'proj.weight']} that "
                         "open_clip_config.json's vision_cfg does not describe (timm_proj 'none' or a bias-free 'linear').")
    trunk = dataclasses.replace(raw, tensors={k[len(PREFIX):]: v for k, v in raw.tensors.items() if k.startswith(PREFIX)})
    tensors = timm.prepare(trunk)
    if HEAD + "proj.weight" in raw.tensors:
        tensors[timm.CLIP_PROJECTION] = raw.tensors[HEAD + "proj.weight"]
    return tensors


def metadata(raw, tensors):
    pool, _, heads = _vision_cfg(raw)
    preprocess = (raw.meta.get("open_clip_config") or {}).get("preprocess_cfg") or {}
    if not isinstance(preprocess, dict):
        raise ValueError(f"{raw.path}: its open_clip_config.json's preprocess_cfg is not a JSON object.")
    mean = preprocess.get("mean")
    return Metadata(approximate_gelu=False, pooling=POOLS[pool], num_heads=heads,
                    preprocessing="siglip" if isinstance(mean, list) and tuple(mean) == HALF else
                    timm.metadata(raw, tensors).preprocessing)


FORMAT = Format(name="open_clip_timm", table=timm.TABLE, detect=detect, prepare=prepare, metadata=metadata,
                interpolation="bicubic_antialias")  # timm's resample_abs_pos_embed
