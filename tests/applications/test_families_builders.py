"""The named models of the families beyond the paper: listed, and with the parameter counts of
the reference implementations (transformers models of the same configuration, on the meta
device: no memory)."""

import math

import pytest

import keras_vit
from keras_vit.families import FAMILIES
from tests.support.models import shapes_only
from tests.support.timm_rope_vit import eva02_shapes, pe_shapes
from tests.support.timm_rope_vit import shapes as rope_vit_shapes

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

# keras_vit name -> (transformers model class, config class, its arguments); what it has that
# keras_vit's model has not: DINOv2's and DINOv3's mask token of width D, used only in pre-training;
# what keras_vit's has that it has not: DINOv3's key bias, D per block (held at zero, `key_bias=False`;
# none in the 7B/16, which has no q / k / v biases).
REFERENCES = {
    "DeiTTi16": ("DeiTForImageClassificationWithTeacher", "DeiTConfig", dict(hidden_size=192, num_attention_heads=3, intermediate_size=768, num_labels=1000)),
    "DeiTS16": ("DeiTForImageClassificationWithTeacher", "DeiTConfig", dict(hidden_size=384, num_attention_heads=6, intermediate_size=1536, num_labels=1000)),
    "DeiTB16": ("DeiTForImageClassificationWithTeacher", "DeiTConfig", dict(hidden_size=768, num_attention_heads=12, intermediate_size=3072, num_labels=1000)),
    "DINOv2S14": ("Dinov2Model", "Dinov2Config", dict(hidden_size=384, num_attention_heads=6, image_size=518, patch_size=14)),
    "DINOv2B14": ("Dinov2Model", "Dinov2Config", dict(hidden_size=768, num_attention_heads=12, image_size=518, patch_size=14)),
    "DINOv2L14": ("Dinov2Model", "Dinov2Config", dict(hidden_size=1024, num_hidden_layers=24, num_attention_heads=16, image_size=518, patch_size=14)),
    "DINOv2G14": ("Dinov2Model", "Dinov2Config", dict(hidden_size=1536, num_hidden_layers=40, num_attention_heads=24, use_swiglu_ffn=True, image_size=518, patch_size=14)),
    **{name: ("DINOv3ViTModel", "DINOv3ViTConfig", dict(hidden_size=d, num_hidden_layers=n, num_attention_heads=h, intermediate_size=m, use_gated_mlp=gated, hidden_act="silu" if gated else "gelu", num_register_tokens=4))
       for name, d, n, h, m, gated in (("DINOv3S16", 384, 12, 6, 1536, False), ("DINOv3SPlus16", 384, 12, 6, 1536, True),
                                       ("DINOv3B16", 768, 12, 12, 3072, False), ("DINOv3L16", 1024, 24, 16, 4096, False),
                                       ("DINOv3HPlus16", 1280, 32, 20, 5120, True))},
    "DINOv37B16": ("DINOv3ViTModel", "DINOv3ViTConfig", dict(hidden_size=4096, num_hidden_layers=40, num_attention_heads=32, intermediate_size=8192, use_gated_mlp=True, hidden_act="silu", num_register_tokens=4, query_bias=False, value_bias=False)),
    "SigLIPB16": ("SiglipVisionModel", "SiglipVisionConfig", dict(hidden_size=768, intermediate_size=3072, num_hidden_layers=12, num_attention_heads=12, patch_size=16, image_size=224)),
    "SigLIPSo400m14": ("SiglipVisionModel", "SiglipVisionConfig", dict(hidden_size=1152, intermediate_size=4304, num_hidden_layers=27, num_attention_heads=16, patch_size=14, image_size=224)),
    "SigLIPL16": ("SiglipVisionModel", "SiglipVisionConfig", dict(hidden_size=1024, intermediate_size=4096, num_hidden_layers=24, num_attention_heads=16, patch_size=16, image_size=256)),
    "SigLIPSo400m16": ("SiglipVisionModel", "SiglipVisionConfig", dict(hidden_size=1152, intermediate_size=4304, num_hidden_layers=27, num_attention_heads=16, patch_size=16, image_size=256)),
    "SigLIPG16": ("SiglipVisionModel", "SiglipVisionConfig", dict(hidden_size=1536, intermediate_size=6144, num_hidden_layers=40, num_attention_heads=16, patch_size=16, image_size=256)),
    # AIMv2: the towers without the attention-pooling head (the builders' default, include_top=False, no pooling).
    **{name: ("Aimv2VisionModel", "Aimv2VisionConfig", dict(hidden_size=d, num_attention_heads=h, intermediate_size=m, use_head=False, is_native=name.endswith("Native")))
       for name, d, h, m in (("AIMv2L14", 1024, 8, 2816), ("AIMv2H14", 1536, 12, 4096), ("AIMv21B14", 2048, 16, 5632),
                             ("AIMv23B14", 3072, 24, 8192), ("AIMv2L14Native", 1024, 8, 2816))},
    # CLIP: the image tower with its projection (transformers' `CLIPVisionModelWithProjection`).
    **{name: ("CLIPVisionModelWithProjection", "CLIPVisionConfig", dict(hidden_size=d, num_hidden_layers=n, num_attention_heads=16 if d > 768 else 12, intermediate_size=m, patch_size=p, image_size=224, projection_dim=e))
       for name, p, d, n, m, e in (("CLIPB32", 32, 768, 12, 3072, 512), ("CLIPB16", 16, 768, 12, 3072, 512),
                                   ("CLIPL14", 14, 1024, 24, 4096, 768), ("CLIPH14", 14, 1280, 32, 5120, 1024),
                                   ("CLIPBigG14", 14, 1664, 48, 8192, 1280))},
}
# Naver's RoPE-ViT: timm's key shapes (`eva.py`; timm is not installed) of width, depth, heads, mixed.
# The `_ape` ones: a table of the 14 x 14 patches, and keras_vit's zero class-token row (`D`).
ROPE_VIT = {f"RoPE{kind}{ape}ViT{size}16": (d, n, h, kind == "Mixed", bool(ape)) for kind in ("", "Mixed")
            for ape in ("", "APE") for size, d, n, h in (("S", 384, 12, 6), ("B", 768, 12, 12), ("L", 1024, 24, 16))}
# EVA-02: timm's key shapes (`eva.py`) of width, depth, heads, SwiGLU width, grid, unfused (B / L).
EVA02 = {"EVA02Ti14": (192, 12, 3, 512, 24, False), "EVA02S14": (384, 12, 6, 1024, 24, False),
         "EVA02B14": (768, 12, 12, 2048, 32, True), "EVA02L14": (1024, 24, 16, 2730, 32, True)}
# EVA-CLIP: timm's key shapes of width, depth, heads, SwiGLU width, patch, grid, projection (`eva02_*_clip_*`).
EVA_CLIP = {"EVA02CLIPB16": (768, 12, 12, 2048, 16, 14, 512), "EVA02CLIPL14": (1024, 24, 16, 2730, 14, 16, 768)}
# PE-core: timm's key shapes (`vit_pe_core_*`) of width, depth, MLP width, patch, grid, projection; less the
# projection's zero bias, which keras_vit's bias-free projection does not keep.
PE_CORE = {"PECoreT16": (192, 12, 768, 16, 24, 512), "PECoreS16": (384, 12, 1536, 16, 24, 512),
           "PECoreB16": (768, 12, 3072, 16, 14, 1024), "PECoreL14": (1024, 24, 4096, 14, 24, 1024)}
# README's table (keras_vit's own count; checked below against the references).
PARAMETERS = {
    "DeiTTi16": 5_910_800, "DeiTS16": 22_436_432, "DeiTB16": 87_338_192,
    "DINOv2S14": 22_056_192, "DINOv2B14": 86_579_712, "DINOv2L14": 304_367_616, "DINOv2G14": 1_136_479_232,
    "DINOv3S16": 21_600_768, "DINOv3SPlus16": 28_697_088, "DINOv3B16": 85_668_864, "DINOv3L16": 303_153_152,
    "DINOv3HPlus16": 840_632_320, "DINOv37B16": 6_716_030_976,
    "RoPEViTS16": 21_984_232, "RoPEViTB16": 86_434_792, "RoPEViTL16": 304_174_056,
    "RoPEMixedViTS16": 21_988_840, "RoPEMixedViTB16": 86_444_008, "RoPEMixedViTL16": 304_198_632,
    "RoPEAPEViTS16": 22_059_880, "RoPEAPEViTB16": 86_586_088, "RoPEAPEViTL16": 304_375_784,
    "RoPEMixedAPEViTS16": 22_064_488, "RoPEMixedAPEViTB16": 86_595_304, "RoPEMixedAPEViTL16": 304_400_360,
    "EVA02Ti14": 5_758_888, "EVA02S14": 22_133_608, "EVA02B14": 87_126_760, "EVA02L14": 305_104_808,
    "SigLIPB16": 92_884_224, "SigLIPSo400m14": 427_680_704,
    "SigLIPL16": 315_956_224, "SigLIPSo400m16": 427_888_064, "SigLIPG16": 1_163_168_256,
    "AIMv2L14": 309_197_824, "AIMv2H14": 680_851_968, "AIMv21B14": 1_234_958_336, "AIMv23B14": 2_720_658_432,
    "AIMv2L14Native": 308_935_680,
    "CLIPB32": 87_849_216, "CLIPB16": 86_192_640, "CLIPL14": 303_966_208, "CLIPH14": 632_076_800,
    "CLIPBigG14": 1_844_907_264,
    "EVA02CLIPB16": 86_272_256, "EVA02CLIPL14": 304_129_728,
    "PECoreT16": 6_140_544, "PECoreS16": 23_782_656, "PECoreB16": 93_672_960, "PECoreL14": 317_151_232,
}


def _reference_count(name):
    if name in ROPE_VIT:
        d, n, h, mixed, ape = ROPE_VIT[name]
        return sum(math.prod(shape) for shape in rope_vit_shapes(d, n, h, 4 * d, mixed=mixed).values()) + ape * 197 * d
    if name in EVA02:  # and keras_vit's zero key bias, `D` per block
        d, n, h, m, grid, unfused = EVA02[name]
        return sum(math.prod(shape) for shape in eva02_shapes(d, n, h, m, grid=grid, unfused=unfused).values()) + d * n
    if name in EVA_CLIP:  # and keras_vit's zero key bias
        d, n, h, m, p, grid, e = EVA_CLIP[name]
        return sum(math.prod(s) for s in eva02_shapes(d, n, h, m, p, grid, e, clip=True).values()) + d * n
    if name in PE_CORE:
        d, n, m, p, grid, e = PE_CORE[name]
        return sum(math.prod(s) for s in pe_shapes(d, n, m, p, grid, e).values()) - e
    model_class, config_class, args = REFERENCES[name]
    with torch.device("meta"):
        model = getattr(transformers, model_class)(getattr(transformers, config_class)(**args))
    count = sum(p.numel() for p in model.parameters())
    if model_class == "DINOv3ViTModel" and args.get("query_bias", True):  # keras_vit's zero key bias
        count += args["hidden_size"] * args["num_hidden_layers"]
    return count - (args["hidden_size"] if model_class in ("Dinov2Model", "DINOv3ViTModel") else 0)


def _keras_count(name):
    """The whole model, its variables shapes without values: no large model is allocated."""
    with shapes_only():
        return getattr(keras_vit, name)(weights=None).count_params()


def test_every_family_builder_is_listed():
    assert set(FAMILIES) <= set(keras_vit.list_models())


@pytest.mark.parametrize("name", FAMILIES)
def test_parameter_counts_match_the_references(name):
    assert _reference_count(name) == PARAMETERS[name]
    assert _keras_count(name) == PARAMETERS[name]


@pytest.mark.backend_independent
def test_every_named_model_and_entry_comes_from_one_family_file():
    """`keras_vit.families`: each named model is declared by one family file, each weight entry names one, and the
    generated builders' docstrings name their weights (help())."""
    from keras_vit import families

    assert all(families.family_of(name) is not None for name in keras_vit.list_models())
    dense = {entry.variant for entry in families.DENSE} - set(keras_vit.list_models())  # EoMT: DINOv2-L at 16 px patches
    assert dense == {"EoMTL16"}
    assert {entry.variant for entry in families.ENTRIES} - dense <= set(keras_vit.list_models())
    assert families.family_of("DINOv2S14") is families.dinov2 and families.family_of("R50ViTB16") is families.vit
    assert "vit_small_patch14_reg4_dinov2.lvd142m" in keras_vit.DINOv2S14.__doc__
    assert "augreg_in21k_ft_in1k_224" in keras_vit.ViTB16.__doc__
