"""Named pretrained checkpoints, as data.

Three families per model, all Apache-2.0 (of the families below, DINOv3 is under Meta's DINOv3 License, AIMv2 under Apple's AMLR, CLIP under each entry's licence):

- "orig_*": the paper's files from the public `vit_models` bucket (Flax `.npz`): ImageNet-21k
  pre-training (224 px, 21843 classes, with the tanh `pre_logits` layer and an all-zero head)
  and the ImageNet-21k -> ImageNet-2012 fine-tunes (384 px, and 224 px for B/16 and L/16).
- "augreg_*": the recommended "How to train your ViT" (AugReg) files, same bucket: the
  ImageNet-21k pre-training (224 px, 21843-class head, no pre_logits) and its ImageNet-1k
  fine-tunes at 224 and 384 px (the selection timm uses).
- timm's safetensors on the Hugging Face hub, named as in timm (e.g.
  "vit_base_patch16_224.augreg2_in21k_ft_in1k"); they load with exact-erf GELU, as timm runs them.

Aliases: `weights="imagenet"` is "augreg_in21k_ft_in1k_224" (the authors' AugReg ImageNet-21k
-> ImageNet-1k fine-tune at 224 px) for Ti/16, S/16, S/32, B/16, B/32 and L/16, and
"orig_in21k_ft_in1k_384" for L/32 (its only ImageNet-1k file); H/14 has no ImageNet-1k
weights. `weights="imagenet21k"` is "augreg_in21k" where it exists (Ti/16, S/16, S/32, B/16,
B/32, L/16: `augreg/{B_16,...}-i21k-300ep-...npz`, whose 21,843-class head is trained, so that
`decode_predictions` names ImageNet-21k classes), else "orig_in21k" (L/32, H/14, R50+B/16:
`imagenet21k/ViT-*.npz`, whose head is all zeros on a `pre_logits` layer: features only).

Hugging Face repo ids name entries too (`HUB_IDS`: the same weights, converted, e.g.
"google/siglip-so400m-patch14-384", "facebook/dinov2-small"); an entry hosted on the hub answers
to its own repo id ("timm/vit_base_patch16_224.augreg2_in21k_ft_in1k").

The families beyond the paper (SPEC section 7), named as timm names them (their Hugging Face hub
copies) or, for SigLIP, as Google's transformers repositories: DeiT distilled (`DeiT*16`) and
plain (under `ViTTi16` / `ViTS16` / `ViTB16`: the same shapes as the paper's, the entry gives
DeiT's preprocessing), DINOv2 with and without registers (`DINOv2*14`; the builders take the `reg4` files'
4 registers from the file), DINOv3 (`DINOv3*16`: timm's copies, `formats.dinov3`, under Meta's DINOv3
License, not Apache-2.0), Naver's RoPE-ViT axial and mixed ImageNet-1k classifiers (`RoPE*ViT*16`: timm's
`vit_*_patch16_rope[_mixed]_224.naver_in1k`, `formats.rope_vit`), SigLIP image towers (the `vision_model` of a `SiglipModel` file)
and Apple's AIMv2 image towers (`AIMv2*14`: `apple/aimv2-*` `Aimv2VisionModel` folders, `formats.hf_aimv2`, under
Apple's AMLR licence, not Apache-2.0), and CLIP image towers (`CLIP*`: timm's copies of OpenAI's, OpenCLIP's
LAION-2B and DataComp, Apple's DFN and Meta's MetaCLIP 2 weights, each under its own licence: `_CLIP`). Each
entry names its preprocessing (`keras_vit.preprocessing`), which the model built on it takes.

sha256 and size are recorded where known; none could be downloaded when this table was
written, so they are None: such files are checked by parsing them completely when first
downloaded, and their size and sha256 recorded then (`download`).
"""

import dataclasses
import os
import re

from keras_vit.family_variants import FAMILIES
from keras_vit.variants import ARCHITECTURE_KEYS, VARIANTS, list_models
from keras_vit.weights import stems

HUB_URL = re.compile(r"https://huggingface\.co/(?P<repo_id>[^/]+/[^/]+)/resolve/(?P<revision>[^/]+)/(?P<filename>.+)")
GCS = "https://storage.googleapis.com/vit_models/"
HUB = "https://huggingface.co/timm/{}/resolve/main/model.safetensors"
FT_384 = "imagenet21k%2Bimagenet2012/"


@dataclasses.dataclass(frozen=True)
class WeightsEntry:
    """One downloadable checkpoint. `classes`: head size (None: no head);
    `representation_size`: width of its pre_logits layer (None: none); `container`: its
    file kind ("npz", "safetensors"); `quick_gelu`: its MLPs' activation where the file does
    not record it (timm's CLIP towers: True for OpenAI's and the other quick-GELU trainings)."""

    variant: str
    name: str
    resolution: int
    classes: int
    representation_size: int
    container: str
    url: str
    license: str = "apache-2.0"
    sha256: str = None
    size: int = None
    aliases: tuple = ()
    preprocessing: str = "vit"
    quick_gelu: bool = None

    @property
    def file_name(self):
        return self.url.rsplit("/", 1)[-1]

    @property
    def description(self):
        head = f"{self.classes} classes" if self.classes else "no head"
        pre = f", pre_logits {self.representation_size}" if self.representation_size else ""
        return f"{self.resolution}px, {head}{pre}, {self.container}, {self.preprocessing} preprocessing"


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
        resolution = int(name.split(".")[0].rsplit("_", 1)[-1])
        tag = name.split(".")[1]
        classes = None if tag == "orig_in21k" else 21843 if tag.endswith("in21k") else 1000
        entries.append(WeightsEntry(variant, name, resolution, classes, None, "safetensors", HUB.format(name)))
    return entries


def _family(variant, preprocessing, resolution, classes, *names, url=HUB, license="apache-2.0", quick_gelu=None):
    return [
        WeightsEntry(variant, name.rsplit("/", 1)[-1], resolution, classes, None, "safetensors", url.format(name),
                     license=license, preprocessing=preprocessing, quick_gelu=quick_gelu)
        for name in names
    ]


# CLIP image towers: timm's copies (`vit_*_clip_*`, the image projection as the head), by variant, timm's name, licence
# and whether they were trained with quick GELU (timm's "natively QuickGELU" notes). OpenAI's (MIT), LAION-2B's
# (OpenCLIP, MIT), DataComp-XL's (MIT), Apple's DFN (apple-ascl) and Meta's MetaCLIP 2 worldwide (CC-BY-NC-4.0).
_CLIP = (
    ("CLIPB32", "vit_base_patch32_clip_224.openai", "mit", True),
    ("CLIPB16", "vit_base_patch16_clip_224.openai", "mit", True),
    ("CLIPL14", "vit_large_patch14_clip_224.openai", "mit", True),
    ("CLIPL14", "vit_large_patch14_clip_336.openai", "mit", True),
    ("CLIPB32", "vit_base_patch32_clip_224.laion2b", "mit", False),
    ("CLIPB16", "vit_base_patch16_clip_224.laion2b", "mit", False),
    ("CLIPL14", "vit_large_patch14_clip_224.laion2b", "mit", False),
    ("CLIPH14", "vit_huge_patch14_clip_224.laion2b", "mit", False),
    ("CLIPBigG14", "vit_gigantic_patch14_clip_224.laion2b", "mit", False),
    ("CLIPB32", "vit_base_patch32_clip_224.datacompxl", "mit", False),
    ("CLIPB16", "vit_base_patch16_clip_224.datacompxl", "mit", False),
    ("CLIPL14", "vit_large_patch14_clip_224.datacompxl", "mit", False),
    ("CLIPB16", "vit_base_patch16_clip_224.dfn2b", "apple-ascl", False),
    ("CLIPL14", "vit_large_patch14_clip_224.dfn2b", "apple-ascl", True),
    ("CLIPH14", "vit_huge_patch14_clip_224.dfn5b", "apple-ascl", True),
    ("CLIPH14", "vit_huge_patch14_clip_378.dfn5b", "apple-ascl", True),
    ("CLIPH14", "vit_huge_patch14_clip_224.metaclip2_worldwide", "cc-by-nc-4.0", True),
)


def _clip(variant, name, license, quick_gelu):
    resolution = int(name.split(".")[0].rsplit("_", 1)[-1])
    # OpenCLIP's L/14 LAION-2B was trained on inputs scaled by mean / std 0.5 (timm's `IMAGENET_INCEPTION_*`):
    # the numbers of the "siglip" entry.
    preprocessing = "siglip" if name == "vit_large_patch14_clip_224.laion2b" else "clip"
    return _family(variant, preprocessing, resolution, None, name, license=license, quick_gelu=quick_gelu)


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
_GOOGLE = "https://huggingface.co/{}/resolve/main/model.safetensors"
_DINOV2 = "vit_{}_patch14_dinov2.lvd142m", "vit_{}_patch14_reg4_dinov2.lvd142m"
# timm's ungated copies of Meta's DINOv3 weights (DINOv3 License); the `_qkvb` files keep the q / v biases
# the builders have (zeros in the distilled models), the 7B has none.
_DINOV3 = "vit_{}_patch16_dinov3_qkvb.{}"

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
    *_family("ViTTi16", "deit", 224, 1000, "deit_tiny_patch16_224.fb_in1k"),
    *_family("ViTS16", "deit", 224, 1000, "deit_small_patch16_224.fb_in1k"),
    *_family("ViTB16", "deit", 224, 1000, "deit_base_patch16_224.fb_in1k"),
    *_family("DeiTTi16", "deit", 224, 1000, "deit_tiny_distilled_patch16_224.fb_in1k"),
    *_family("DeiTS16", "deit", 224, 1000, "deit_small_distilled_patch16_224.fb_in1k"),
    *_family("DeiTB16", "deit", 224, 1000, "deit_base_distilled_patch16_224.fb_in1k"),
    *_family("DINOv2S14", "dinov2", 518, None, *(n.format("small") for n in _DINOV2)),
    *_family("DINOv2B14", "dinov2", 518, None, *(n.format("base") for n in _DINOV2)),
    *_family("DINOv2L14", "dinov2", 518, None, *(n.format("large") for n in _DINOV2)),
    *_family("DINOv2G14", "dinov2", 518, None, *(n.format("giant") for n in _DINOV2)),
    *(entry for variant, size, data in (("DINOv3S16", "small", "lvd1689m"), ("DINOv3SPlus16", "small_plus", "lvd1689m"),
                                         ("DINOv3B16", "base", "lvd1689m"), ("DINOv3L16", "large", "lvd1689m"),
                                         ("DINOv3L16", "large", "sat493m"), ("DINOv3HPlus16", "huge_plus", "lvd1689m"))
      for entry in _family(variant, "dinov3", 224, None, _DINOV3.format(size, data), license="dinov3-license")),
    *_family("DINOv37B16", "dinov3", 224, None, "vit_7b_patch16_dinov3.lvd1689m", "vit_7b_patch16_dinov3.sat493m",
             license="dinov3-license"),
    *(entry for size, name in (("S", "small"), ("B", "base"), ("L", "large")) for kind, tag in (("", ""), ("Mixed", "_mixed"))
      for ape in ("", "APE")
      for entry in _family(f"RoPE{kind}{ape}ViT{size}16", "deit", 224, 1000,
                           f"vit_{name}_patch16_rope{tag}{'_ape' if ape else ''}_224.naver_in1k")),
    # EVA-02 (timm `eva.py`, MIT): the ImageNet-1k fine-tuned files, and the MIM pre-trained ones (224 px, no head).
    *_family("EVA02Ti14", "eva02", 336, 1000, "eva02_tiny_patch14_336.mim_in22k_ft_in1k", license="mit"),
    *_family("EVA02S14", "eva02", 336, 1000, "eva02_small_patch14_336.mim_in22k_ft_in1k", license="mit"),
    *_family("EVA02B14", "eva02", 448, 1000, "eva02_base_patch14_448.mim_in22k_ft_in22k_in1k", license="mit"),
    *_family("EVA02L14", "eva02", 448, 1000, "eva02_large_patch14_448.mim_in22k_ft_in22k_in1k",
             "eva02_large_patch14_448.mim_m38m_ft_in22k_in1k", license="mit"),
    *(entry for variant, size in (("EVA02Ti14", "tiny"), ("EVA02S14", "small"), ("EVA02B14", "base"), ("EVA02L14", "large"))
      for entry in _family(variant, "eva02", 224, None, f"eva02_{size}_patch14_224.mim_in22k", license="mit")),
    *_family("EVA02L14", "eva02", 224, None, "eva02_large_patch14_224.mim_m38m", license="mit"),
    *_family("SigLIPB16", "siglip", 224, None, "google/siglip-base-patch16-224", url=_GOOGLE),
    *_family("SigLIPSo400m14", "siglip", 224, None, "google/siglip-so400m-patch14-224", url=_GOOGLE),
    # "384 px": its 27 x 27 patches cover 378 px (transformers' stride-14 convolution drops 6).
    *_family("SigLIPSo400m14", "siglip", 378, None, "google/siglip-so400m-patch14-384", url=_GOOGLE),
    # SigLIP 2's fixed-resolution towers: `SiglipModel` files (the NaFlex ones, `Siglip2Model`, load by path).
    *(entry for res in (224, 256, 384, 512)
      for entry in _family("SigLIPB16", "siglip2", res, None, f"google/siglip2-base-patch16-{res}", url=_GOOGLE)),
    *_family("SigLIPSo400m14", "siglip2", 224, None, "google/siglip2-so400m-patch14-224", url=_GOOGLE),
    *_family("SigLIPSo400m14", "siglip2", 378, None, "google/siglip2-so400m-patch14-384", url=_GOOGLE),
    *(entry for res in (256, 384, 512) for variant, repo in (("SigLIPL16", "large"), ("SigLIPSo400m16", "so400m"))
      for entry in _family(variant, "siglip2", res, None, f"google/siglip2-{repo}-patch16-{res}", url=_GOOGLE)),
    *(entry for res in (256, 384)
      for entry in _family("SigLIPG16", "siglip2", res, None, f"google/siglip2-giant-opt-patch16-{res}", url=_GOOGLE)),
    # AIMv2 image towers (`Aimv2VisionModel` folders), under Apple's AMLR licence (research use).
    *(entry for variant, size in (("AIMv2L14", "large"), ("AIMv2H14", "huge"), ("AIMv21B14", "1B"), ("AIMv23B14", "3B"))
      for res in (224, 336, 448)
      for entry in _family(variant, "aimv2", res, None, f"apple/aimv2-{size}-patch14-{res}", url=_GOOGLE,
                           license="apple-amlr")),
    *_family("AIMv2L14Native", "aimv2", 224, None, "apple/aimv2-large-patch14-native", url=_GOOGLE,
             license="apple-amlr"),
    *(entry for row in _CLIP for entry in _clip(*row)),
]

# --- Dense prediction (issue 41): transformers folders (config.json + model.safetensors) that
# `keras_vit.from_checkpoint` reads whole (`keras_vit.dense.reading`: a depth model, an EoMT segmenter),
# listed under their backbone's model. Depth Anything V2 (depth-anything/*-hf): Small Apache-2.0, Base and
# Large CC-BY-NC-4.0; EoMT (tue-mps, MIT): DINOv2-L with 4 registers whose patch embedding EoMT resized to
# 16 px (no named model: listed as "EoMTL16"), at its training size.
_DENSE_HUB = "https://huggingface.co/{}/resolve/main/model.safetensors"
DENSE = [
    *(WeightsEntry(variant, f"depth_anything_v2_{size.lower()}", 518, None, None, "safetensors",
                   _DENSE_HUB.format(f"depth-anything/Depth-Anything-V2-{size}-hf"), license=license, preprocessing="dinov2")
      for variant, size, license in (("DINOv2S14", "Small", "apache-2.0"), ("DINOv2B14", "Base", "cc-by-nc-4.0"),
                                     ("DINOv2L14", "Large", "cc-by-nc-4.0"))),
    *(WeightsEntry("EoMTL16", name, resolution, None, None, "safetensors", _DENSE_HUB.format(f"tue-mps/{name}"),
                   license="mit", preprocessing="eomt")
      for name, resolution in (("ade20k_semantic_eomt_large_512", 512), ("cityscapes_semantic_eomt_large_1024", 1024),
                               ("coco_panoptic_eomt_large_640", 640))),
]
ENTRIES.extend(DENSE)
# --- end of the dense-prediction block

ALIASES = {
    "imagenet": ("augreg_in21k_ft_in1k_224", "orig_in21k_ft_in1k_384",
                 *(f"deit_{size}_distilled_patch16_224.fb_in1k" for size in ("tiny", "small", "base"))),
    "imagenet21k": ("augreg_in21k", "orig_in21k"),
}

# Hugging Face repo ids of the same weights as an entry ("Variant/name"), converted to
# transformers: what users copy from the hub's pages.
_SIZES = {"small": "S", "base": "B", "large": "L", "giant": "G"}
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
    **{f"facebook/deit-{size}-patch16-224": f"ViT{s}16/deit_{size}_patch16_224.fb_in1k"
       for size, s in (("tiny", "Ti"), ("small", "S"), ("base", "B"))},
    **{f"facebook/deit-{size}-distilled-patch16-224": f"DeiT{s}16/deit_{size}_distilled_patch16_224.fb_in1k"
       for size, s in (("tiny", "Ti"), ("small", "S"), ("base", "B"))},
    **{f"facebook/dinov2-{size}": f"DINOv2{s}14/" + _DINOV2[0].format(size) for size, s in _SIZES.items()},
    **{f"facebook/dinov2-with-registers-{size}": f"DINOv2{s}14/" + _DINOV2[1].format(size) for size, s in _SIZES.items()},
}


def hub_repo_id(entry):
    """The Hugging Face repo id `entry`'s file is downloaded from, or None."""
    match = HUB_URL.fullmatch(entry.url)
    return match["repo_id"] if match else None


def _named_by_repo_id(name):
    """"Variant/name" of the entry that the Hugging Face repo id `name` names, or None."""
    if name in HUB_IDS:
        return HUB_IDS[name]
    return next((f"{e.variant}/{e.name}" for e in ENTRIES if hub_repo_id(e) == name), None)


def is_named(source):
    """Whether the string `source` is spelled as a checkpoint name: a name, "Variant/name", or a
    known Hugging Face repo id (else it can only be a path)."""
    return "/" not in source or source.split("/", 1)[0] in list_models() or _named_by_repo_id(source) is not None


def add(entry):
    """Adds a `WeightsEntry` (e.g. for a hybrid variant); replaces one of the same name."""
    ENTRIES[:] = [e for e in ENTRIES if (e.variant, e.name) != (entry.variant, entry.name)] + [entry]


def architecture(variant):
    """The builder arguments of the named model `variant` (its family's options included); {}
    for a hybrid, whose files record their heads."""
    return dict(FAMILIES.get(variant) or VARIANTS.get(variant) or {})


def entries(variant=None):
    """The entries of `variant` (e.g. "ViTB16"), or all."""
    return [e for e in ENTRIES if variant is None or e.variant == variant]


# What tells the named models apart besides the five numbers (a DeiT-B/16 has ViT-B/16's).
# Register tokens do not: DINOv2's `reg4` files are entries of the DINOv2 models.
_OPTIONS = ("class_token", "distillation_token", "position_embedding", "rope_form", "rope_absolute", "mlp",
            "patch_norm", "pre_norm")


def _signature(args):
    return (*(args[k] for k in ARCHITECTURE_KEYS + _OPTIONS), args["layer_scale_init"] is not None)


def variant_of(config):
    """The name of the named model (`list_models()`) a `ViTConfig` builds (None for a custom
    architecture): its five numbers and its family's options, so that a DeiT-B/16 is not a
    ViT-B/16."""
    if config.stem is not None:
        layout = stems.stem_of_layer(config.stem)
        return layout.variant if layout else None
    defaults = {f.name: f.default for f in dataclasses.fields(config)}
    wanted = _signature({f.name: getattr(config, f.name) for f in dataclasses.fields(config)})
    models = {**VARIANTS, **FAMILIES}
    return next((name for name, args in models.items() if _signature({**defaults, **args}) == wanted), None)


def find(name, variant=None):
    """The entry called `name` (or an alias, or a Hugging Face repo id of `HUB_IDS` or of its
    file) for `variant`; without a variant, `name` must be "Variant/name", a repo id, or unique
    among all entries. Raises ValueError listing the choices."""
    spelled = _named_by_repo_id(name) or name
    if "/" in spelled and spelled.split("/", 1)[0] in list_models():
        named_variant, name = spelled.split("/", 1)
        if variant is not None and named_variant != variant:
            raise ValueError(f"Weights {spelled!r} are {named_variant}'s; this model is a {variant}.")
        variant = named_variant
    candidates = entries(variant)
    for wanted in ALIASES.get(name, (name,)):
        matches = [e for e in candidates if e.name == wanted]
        if len(matches) == 1:
            return matches[0]
        if len(matches) > 1:
            raise ValueError(f"Checkpoint name {name!r} is ambiguous; use 'Variant/{name}', e.g. {matches[0].variant}/{name}.")
    where = f"for {variant}" if variant else "for this architecture"
    known = ", ".join(sorted({e.name for e in candidates} | ({*ALIASES} if candidates else set())))
    raise ValueError(
        f"Unknown weights {name!r} {where}: not an existing file or folder, nor a named checkpoint"
        + (f" (known: {known}; see keras_vit.list_weights({variant!r}))." if candidates else ".")
    )


def cache_path(entry):
    """Where `entry` is cached (and where a manually downloaded file is picked up)."""
    home = os.environ.get("KERAS_VIT_HOME") or os.path.join(os.path.expanduser("~"), ".keras", "keras_vit")
    return os.path.join(home, entry.variant, entry.name, entry.file_name)


def list_weights(model=None):
    """The named checkpoints (`WeightsEntry` records) of `model` (e.g. "ViTB16"), or of all
    models; `weights_table` formats them as `keras-vit list-weights` prints them."""
    if model is not None and model not in list_models() and not entries(model):
        raise ValueError(f"Unknown model {model!r}; available: {', '.join(list_models())}.")
    return entries(model)


def weights_table(model=None):
    """`list_weights(model)` as a text table, each alias' entry ('imagenet', 'imagenet21k') marked."""
    rows = list_weights(model)
    if not rows:
        return f"(no named checkpoints for {model})"
    marks = {}
    for variant in {e.variant for e in rows}:
        for alias in ALIASES:
            marks.setdefault((variant, _alias_target(variant, alias)), []).append(f"'{alias}'")
    lines = [f"{'model':<14} {'weights':<45} {'res':>4} {'classes':>7} {'pre_logits':>10} {'container':<11} "
             f"{'input':<7} license"]
    for e in rows:
        aliases = marks.get((e.variant, e.name))
        mark = f"  (weights={' or '.join(aliases)})" if aliases else ""
        lines.append(
            f"{e.variant:<14} {e.name:<45} {e.resolution:>4} {e.classes or '-':>7} "
            f"{e.representation_size or '-':>10} {e.container:<11} {e.preprocessing:<7} {e.license}{mark}\n{'':<15}{e.url}"
        )
    return "\n".join(lines)


def _alias_target(variant, alias):
    names = {e.name for e in entries(variant)}
    return next((n for n in ALIASES[alias] if n in names), None)
