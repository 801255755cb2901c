"""Builders of the named models of the families beyond the paper (`family_variants.FAMILIES`)."""

from keras_vit.applications.vision_transformer import named_builder
from keras_vit.family_variants import FAMILIES


def _family(name):
    entry = dict(FAMILIES[name])
    size = entry.pop("input_size")
    doc = (f"{name}: width {entry['hidden_dim']}, depth {entry['depth']}, {entry['num_heads']} heads, MLP "
           f"{entry['mlp_dim']}, patch {entry['patch_size']}, {size} px by default.\n\n"
           "Takes the arguments of `VisionTransformer` (they override the family's).")
    return named_builder(name, {**entry, "name": name.lower()}, doc, __name__, input_size=size)


DeiTTi16 = _family("DeiTTi16")
DeiTS16 = _family("DeiTS16")
DeiTB16 = _family("DeiTB16")
DINOv2S14 = _family("DINOv2S14")
DINOv2B14 = _family("DINOv2B14")
DINOv2L14 = _family("DINOv2L14")
DINOv2G14 = _family("DINOv2G14")
DINOv3S16 = _family("DINOv3S16")
DINOv3SPlus16 = _family("DINOv3SPlus16")
DINOv3B16 = _family("DINOv3B16")
DINOv3L16 = _family("DINOv3L16")
DINOv3HPlus16 = _family("DINOv3HPlus16")
DINOv37B16 = _family("DINOv37B16")
RoPEViTS16 = _family("RoPEViTS16")
RoPEViTB16 = _family("RoPEViTB16")
RoPEViTL16 = _family("RoPEViTL16")
RoPEMixedViTS16 = _family("RoPEMixedViTS16")
RoPEMixedViTB16 = _family("RoPEMixedViTB16")
RoPEMixedViTL16 = _family("RoPEMixedViTL16")
EVA02Ti14 = _family("EVA02Ti14")
EVA02S14 = _family("EVA02S14")
EVA02B14 = _family("EVA02B14")
EVA02L14 = _family("EVA02L14")
RoPEAPEViTS16 = _family("RoPEAPEViTS16")
RoPEAPEViTB16 = _family("RoPEAPEViTB16")
RoPEAPEViTL16 = _family("RoPEAPEViTL16")
RoPEMixedAPEViTS16 = _family("RoPEMixedAPEViTS16")
RoPEMixedAPEViTB16 = _family("RoPEMixedAPEViTB16")
RoPEMixedAPEViTL16 = _family("RoPEMixedAPEViTL16")
SigLIPB16 = _family("SigLIPB16")
SigLIPSo400m14 = _family("SigLIPSo400m14")
SigLIPL16 = _family("SigLIPL16")
SigLIPSo400m16 = _family("SigLIPSo400m16")
SigLIPG16 = _family("SigLIPG16")
AIMv2L14 = _family("AIMv2L14")
AIMv2H14 = _family("AIMv2H14")
AIMv21B14 = _family("AIMv21B14")
AIMv23B14 = _family("AIMv23B14")
AIMv2L14Native = _family("AIMv2L14Native")
CLIPB32 = _family("CLIPB32")
CLIPB16 = _family("CLIPB16")
CLIPL14 = _family("CLIPL14")
CLIPH14 = _family("CLIPH14")
CLIPBigG14 = _family("CLIPBigG14")
