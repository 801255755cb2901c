"""The hybrid R50+ViT-B/16 of the paper (section 3.1): ViT-B on a BiT ResNet-50 feature map."""

from keras_vit.variants import variant
from keras_vit.applications.vision_transformer import VisionTransformer
from keras_vit.layers.resnet import ORIGINAL_NUMERICS, ResNetV2Stem
from keras_vit.weights import hybrid as hybrid_weights

R50_STAGES = (3, 4, 9)


def R50ViTB16(
    include_top=True,
    weights=None,
    input_tensor=None,
    input_shape=None,
    pooling=None,
    classes=1000,
    classifier_activation="softmax",
    **kwargs,
):
    """R50+ViT-B/16: a ResNet-50 with stages (3, 4, 9) (stride 16, 1024 channels), a 1x1
    `embedding` conv to width 768 (patch size 1 on the feature map: 14x14 tokens at 224),
    then ViT-B (depth 12, 12 heads, MLP 3072). 98,659,112 parameters at 224 px with 1000
    classes.

    Takes the arguments of `VisionTransformer` except the architecture. The ResNet is the
    layer `model.get_layer("stem")` (`keras_vit.layers.ResNetV2Stem`); it follows the
    numerical convention of the checkpoint's source (original npz or timm).
    """
    arch = variant("ViTB16")
    arch["patch_size"] = 1
    numerics = ORIGINAL_NUMERICS if weights is None else hybrid_weights.stem_numerics(weights)
    return VisionTransformer(
        **arch,
        include_top=include_top,
        weights=weights,
        input_tensor=input_tensor,
        input_shape=input_shape,
        pooling=pooling,
        classes=classes,
        classifier_activation=classifier_activation,
        stem=ResNetV2Stem(R50_STAGES, width=64, **numerics),
        name=kwargs.pop("name", "vit_r50_b16"),
        **kwargs,
    )
