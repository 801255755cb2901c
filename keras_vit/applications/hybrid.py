"""The hybrid R50+ViT-B/16 of the paper (section 3.1): ViT-B on a BiT ResNet-50 feature map."""

from keras_vit.variants import variant
from keras_vit.applications.vision_transformer import named_builder
from keras_vit.layers.resnet import ORIGINAL_NUMERICS, ResNetV2Stem
from keras_vit.weights import hybrid as hybrid_weights

R50_STAGES = (3, 4, 9)


def _with_stem(args):
    """The ResNet stem in the numerical convention of the weights' source (original npz or timm)."""
    numerics = ORIGINAL_NUMERICS if args["weights"] is None else hybrid_weights.stem_numerics(args["weights"])
    return {**args, "stem": ResNetV2Stem(R50_STAGES, width=64, **numerics)}


R50ViTB16 = named_builder(
    "R50ViTB16",
    {**variant("ViTB16"), "patch_size": 1, "name": "vit_r50_b16"},
    """R50+ViT-B/16: a ResNet-50 with stages (3, 4, 9) (stride 16, 1024 channels), a 1x1
    `embedding` conv to width 768 (patch size 1 on the feature map: 14x14 tokens at 224),
    then ViT-B (depth 12, 12 heads, MLP 3072). 98,659,112 parameters at 224 px with 1000
    classes.

    Takes the arguments of `VisionTransformer` except the architecture. The ResNet is the
    layer `model.get_layer("stem")` (`keras_vit.layers.ResNetV2Stem`); it follows the
    numerical convention of the checkpoint's source (original npz or timm).
    """,
    __name__,
    prepare=_with_stem,
)
