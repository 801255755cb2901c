"""DINOv2 (Oquab et al., 2023), with and without registers: LayerScale, patch 14 at 518 px;
g/14 with a SwiGLU MLP. timm's `vit_*_patch14[_reg4]_dinov2.lvd142m` files (Apache-2.0); the
builders take the `reg4` files' 4 registers from the file."""

from keras_vit.families.records import HUB, IMAGENET_MEAN, IMAGENET_STD, Preprocessing, WeightsEntry, hub_entries

_DINOV2 = dict(patch_size=14, layer_scale_init=1e-5, approximate_gelu=False, input_size=518, include_top=False,
               preprocessing="dinov2")

MODELS = {
    "DINOv2S14": dict(_DINOV2, hidden_dim=384, depth=12, num_heads=6, mlp_dim=1536),
    "DINOv2B14": dict(_DINOV2, hidden_dim=768, depth=12, num_heads=12, mlp_dim=3072),
    "DINOv2L14": dict(_DINOV2, hidden_dim=1024, depth=24, num_heads=16, mlp_dim=4096),
    "DINOv2G14": dict(_DINOV2, hidden_dim=1536, depth=40, num_heads=24, mlp_dim=4096, mlp="swiglu"),
}

PREPROCESSING = {
    # timm vit_*_dinov2: ImageNet mean / std, bicubic, crop_pct 1.0.
    "dinov2": Preprocessing(IMAGENET_MEAN, IMAGENET_STD, "bicubic", 1.0),
}

_SIZES = {"small": "S", "base": "B", "large": "L", "giant": "G"}
_FILES = "vit_{}_patch14_dinov2.lvd142m", "vit_{}_patch14_reg4_dinov2.lvd142m"

# Depth Anything V2 (depth-anything/*-hf): transformers folders that `keras_vit.from_checkpoint` reads whole
# (`keras_vit.dense`), listed under their backbone. Small Apache-2.0, Base and Large CC-BY-NC-4.0.
DENSE = [
    WeightsEntry(f"DINOv2{s}14", f"depth_anything_v2_{size.lower()}", 518, None, None, "safetensors",
                 HUB.format(f"depth-anything/Depth-Anything-V2-{size}-hf"), license=license, preprocessing="dinov2")
    for s, size, license in (("S", "Small", "apache-2.0"), ("B", "Base", "cc-by-nc-4.0"), ("L", "Large", "cc-by-nc-4.0"))
]

# DINOv2's linear segmentation heads (Apache-2.0, as its weights): mmseg files of the head alone,
# `keras_vit.from_checkpoint(name)` puts on the DINOv2 it was trained on (`DENSE_BACKBONES`), without registers.
# "linear": the last block's patch tokens; "ms": the last four's (its multi-scale test-time
# augmentation is an evaluation mode, not part of the file). ADE20K: 150 classes, VOC 2012: 21.
_HEAD_URL = "https://dl.fbaipublicfiles.com/dinov2/dinov2_vit{0}14/dinov2_vit{0}14_{1}_{2}_head.pth"
_HEADS = {  # entry -> the weights of the backbone it was trained on
    WeightsEntry(f"DINOv2{s}14", f"dinov2_vit{s.lower()}14_{data}_{kind}_head", 518, None, None, "torch",
                 _HEAD_URL.format(s.lower(), data, kind), preprocessing="dinov2"): f"DINOv2{s}14/" + _FILES[0].format(size)
    for size, s in _SIZES.items() for data in ("ade20k", "voc2012") for kind in ("linear", "ms")
}
DENSE += list(_HEADS)
DENSE_BACKBONES = {entry.name: backbone for entry, backbone in _HEADS.items()}

ENTRIES = [entry for size, s in _SIZES.items()
           for entry in hub_entries(f"DINOv2{s}14", "dinov2", 518, None, *(n.format(size) for n in _FILES))] + DENSE

HUB_IDS = {
    **{f"facebook/dinov2-{size}": f"DINOv2{s}14/" + _FILES[0].format(size) for size, s in _SIZES.items()},
    **{f"facebook/dinov2-with-registers-{size}": f"DINOv2{s}14/" + _FILES[1].format(size) for size, s in _SIZES.items()},
}
