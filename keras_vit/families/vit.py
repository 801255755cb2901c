"""The paper's family (Dosovitskiy et al., 2021): its variants (Table 1; Ti and S from DeiT /
"How to train your ViT"), the hybrid R50+ViT-B/16, and their weights.

- "orig_*": the paper's files from the public `vit_models` bucket (Flax `.npz`): ImageNet-21k
  pre-training (224 px, 21843 classes, with the tanh `pre_logits` layer and an all-zero head)
  and the ImageNet-21k -> ImageNet-2012 fine-tunes (384 px, and 224 px for B/16 and L/16).
- "augreg_*": the recommended "How to train your ViT" (AugReg) files, same bucket: the
  ImageNet-21k pre-training (224 px, 21843-class head, no pre_logits) and its ImageNet-1k
  fine-tunes at 224 and 384 px (the selection timm uses).
- timm's safetensors on the Hugging Face hub, named as in timm (e.g.
  "vit_base_patch16_224.augreg2_in21k_ft_in1k"); they load with exact-erf GELU, as timm runs them.

All Apache-2.0. Aliases: `weights="imagenet"` is "augreg_in21k_ft_in1k_224" (the authors' AugReg
ImageNet-21k -> ImageNet-1k fine-tune at 224 px) for Ti/16, S/16, S/32, B/16, B/32 and L/16, and
"orig_in21k_ft_in1k_384" for L/32 (its only ImageNet-1k file); H/14 has no ImageNet-1k weights.
`weights="imagenet21k"` is "augreg_in21k" where it exists (Ti/16, S/16, S/32, B/16, B/32, L/16,
whose 21,843-class head is trained, so that `decode_predictions` names ImageNet-21k classes), else
"orig_in21k" (L/32, H/14, R50+B/16: `imagenet21k/ViT-*.npz`, whose head is all zeros on a
`pre_logits` layer: features only).
"""

from keras_vit.families.records import HALF, TIMM_HUB, Preprocessing, WeightsEntry, timm_resolution

# The five numbers of each variant (`variants.ARCHITECTURE_KEYS`); the other arguments are the builder's defaults.
MODELS = {
    "ViTTi16": dict(patch_size=16, hidden_dim=192, depth=12, num_heads=3, mlp_dim=768),
    "ViTS16": dict(patch_size=16, hidden_dim=384, depth=12, num_heads=6, mlp_dim=1536),
    "ViTS32": dict(patch_size=32, hidden_dim=384, depth=12, num_heads=6, mlp_dim=1536),
    "ViTB16": dict(patch_size=16, hidden_dim=768, depth=12, num_heads=12, mlp_dim=3072),
    "ViTB32": dict(patch_size=32, hidden_dim=768, depth=12, num_heads=12, mlp_dim=3072),
    "ViTL16": dict(patch_size=16, hidden_dim=1024, depth=24, num_heads=16, mlp_dim=4096),
    "ViTL32": dict(patch_size=32, hidden_dim=1024, depth=24, num_heads=16, mlp_dim=4096),
    "ViTH14": dict(patch_size=14, hidden_dim=1280, depth=32, num_heads=16, mlp_dim=5120),
}
# Builders that are not a plain VisionTransformer of a table (a CNN stem before the encoder:
# `keras_vit.applications.hybrid`).
HYBRIDS = ("R50ViTB16",)

PREPROCESSING = {
    # The paper's: (pixels - 127.5) / 127.5, i.e. [-1, 1]; bilinear resize.
    "vit": Preprocessing(HALF, HALF, "bilinear", 1.0),
}

GCS = "https://storage.googleapis.com/vit_models/"
FT_384 = "imagenet21k%2Bimagenet2012/"


def _orig(variant, file, width):
    return [
        WeightsEntry(variant, "orig_in21k", 224, 21843, width, "npz", GCS + f"imagenet21k/{file}.npz"),
        WeightsEntry(variant, "orig_in21k_ft_in1k_384", 384, 1000, None, "npz", GCS + FT_384 + f"{file}.npz"),
    ]


def _augreg(variant, pretrain, ft224, ft384):
    return [
        WeightsEntry(variant, "augreg_in21k", 224, 21843, None, "npz", GCS + f"augreg/{pretrain}.npz"),
        WeightsEntry(variant, "augreg_in21k_ft_in1k_224", 224, 1000, None, "npz", GCS + f"augreg/{ft224}.npz"),
        WeightsEntry(variant, "augreg_in21k_ft_in1k_384", 384, 1000, None, "npz", GCS + f"augreg/{ft384}.npz"),
    ]


def _timm(variant, *names):
    entries = []
    for name in names:
        tag = name.split(".")[1]
        classes = None if tag == "orig_in21k" else 21843 if tag.endswith("in21k") else 1000
        entries.append(WeightsEntry(variant, name, timm_resolution(name), classes, None, "safetensors",
                                    TIMM_HUB.format(name)))
    return entries


def _ft(pretrain, lr, res):
    return f"{pretrain}--imagenet2012-steps_20k-lr_{lr}-res_{res}"


_TI16 = "Ti_16-i21k-300ep-lr_0.001-aug_none-wd_0.03-do_0.0-sd_0.0"
_S16 = "S_16-i21k-300ep-lr_0.001-aug_light1-wd_0.03-do_0.0-sd_0.0"
_S32 = "S_32-i21k-300ep-lr_0.001-aug_light1-wd_0.03-do_0.0-sd_0.0"
_B16 = "B_16-i21k-300ep-lr_0.001-aug_medium1-wd_0.1-do_0.0-sd_0.0"
_B32 = "B_32-i21k-300ep-lr_0.001-aug_medium1-wd_0.03-do_0.0-sd_0.0"
_B32_LIGHT = "B_32-i21k-300ep-lr_0.001-aug_light1-wd_0.1-do_0.0-sd_0.0"
_L16 = "L_16-i21k-300ep-lr_0.001-aug_medium1-wd_0.1-do_0.1-sd_0.1"
_R50 = "R50%2BViT-B_16.npz"

ENTRIES = [
    *_augreg("ViTTi16", _TI16, _ft(_TI16, 0.03, 224), _ft(_TI16, 0.03, 384)),
    *_timm("ViTTi16", "vit_tiny_patch16_224.augreg_in21k_ft_in1k", "vit_tiny_patch16_384.augreg_in21k_ft_in1k",
           "vit_tiny_patch16_224.augreg_in21k"),
    *_augreg("ViTS16", _S16, _ft(_S16, 0.03, 224), _ft(_S16, 0.03, 384)),
    *_timm("ViTS16", "vit_small_patch16_224.augreg_in21k_ft_in1k", "vit_small_patch16_384.augreg_in21k_ft_in1k",
           "vit_small_patch16_224.augreg_in21k"),
    *_augreg("ViTS32", _S32, _ft(_S32, 0.03, 224), _ft(_S32, 0.03, 384)),
    *_timm("ViTS32", "vit_small_patch32_224.augreg_in21k_ft_in1k", "vit_small_patch32_384.augreg_in21k_ft_in1k",
           "vit_small_patch32_224.augreg_in21k"),
    *_orig("ViTB16", "ViT-B_16", 768),
    WeightsEntry("ViTB16", "orig_in21k_ft_in1k_224", 224, 1000, None, "npz", GCS + FT_384 + "ViT-B_16-224.npz"),
    *_augreg("ViTB16", _B16, _ft(_B16, 0.01, 224), _ft(_B16, 0.01, 384)),
    *_timm("ViTB16", "vit_base_patch16_224.augreg2_in21k_ft_in1k", "vit_base_patch16_224.augreg_in21k_ft_in1k",
           "vit_base_patch16_384.augreg_in21k_ft_in1k", "vit_base_patch16_224.orig_in21k_ft_in1k",
           "vit_base_patch16_384.orig_in21k_ft_in1k", "vit_base_patch16_224.augreg_in21k",
           "vit_base_patch16_224.orig_in21k"),
    *_orig("ViTB32", "ViT-B_32", 768),
    *_augreg("ViTB32", _B32, _ft(_B32, 0.03, 224), _ft(_B32_LIGHT, 0.03, 384)),
    *_timm("ViTB32", "vit_base_patch32_224.augreg_in21k_ft_in1k", "vit_base_patch32_384.augreg_in21k_ft_in1k",
           "vit_base_patch32_224.augreg_in21k", "vit_base_patch32_224.orig_in21k"),
    *_orig("ViTL16", "ViT-L_16", 1024),
    WeightsEntry("ViTL16", "orig_in21k_ft_in1k_224", 224, 1000, None, "npz", GCS + FT_384 + "ViT-L_16-224.npz"),
    *_augreg("ViTL16", _L16, _ft(_L16, 0.01, 224), _ft(_L16, 0.01, 384)),
    *_timm("ViTL16", "vit_large_patch16_224.augreg_in21k_ft_in1k", "vit_large_patch16_384.augreg_in21k_ft_in1k",
           "vit_large_patch16_224.augreg_in21k", "vit_large_patch16_224.orig_in21k"),
    *_orig("ViTL32", "ViT-L_32", 1024),
    *_timm("ViTL32", "vit_large_patch32_384.orig_in21k_ft_in1k", "vit_large_patch32_224.orig_in21k"),
    WeightsEntry("ViTH14", "orig_in21k", 224, 21843, 1280, "npz", GCS + "imagenet21k/ViT-H_14.npz"),
    *_timm("ViTH14", "vit_huge_patch14_224.orig_in21k"),
    WeightsEntry("R50ViTB16", "orig_in21k", 224, 21843, 768, "npz", GCS + "imagenet21k/" + _R50),
    WeightsEntry("R50ViTB16", "orig_in21k_ft_in1k_384", 384, 1000, None, "npz", GCS + FT_384 + _R50),
    *_timm("R50ViTB16", "vit_base_r50_s16_384.orig_in21k_ft_in1k", "vit_base_r50_s16_224.orig_in21k"),
]

ALIASES = {
    "imagenet": ("augreg_in21k_ft_in1k_224", "orig_in21k_ft_in1k_384"),
    "imagenet21k": ("augreg_in21k", "orig_in21k"),
}

# Hugging Face repo ids of the same weights as an entry ("Variant/name"), converted to transformers.
HUB_IDS = {
    "google/vit-base-patch16-224": "ViTB16/orig_in21k_ft_in1k_224",
    "google/vit-base-patch16-384": "ViTB16/orig_in21k_ft_in1k_384",
    "google/vit-base-patch32-384": "ViTB32/orig_in21k_ft_in1k_384",
    "google/vit-large-patch16-224": "ViTL16/orig_in21k_ft_in1k_224",
    "google/vit-large-patch16-384": "ViTL16/orig_in21k_ft_in1k_384",
    "google/vit-large-patch32-384": "ViTL32/orig_in21k_ft_in1k_384",
    "google/vit-base-patch16-224-in21k": "ViTB16/orig_in21k",
    "google/vit-base-patch32-224-in21k": "ViTB32/orig_in21k",
    "google/vit-large-patch16-224-in21k": "ViTL16/orig_in21k",
    "google/vit-large-patch32-224-in21k": "ViTL32/orig_in21k",
    "google/vit-huge-patch14-224-in21k": "ViTH14/orig_in21k",
}
