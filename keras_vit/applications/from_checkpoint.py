"""`from_checkpoint`: the Vision Transformer of any supported checkpoint, its architecture
read from the file."""

from keras_vit.applications.vision_transformer import VisionTransformer
from keras_vit.weights.reading import weights_checkpoint


def from_checkpoint(source, force_download=False, **builder_args):
    """Builds the model that `source` (a checkpoint path, folder or name) holds, with its weights.

    The architecture (sizes, class / distillation / register tokens, position embeddings,
    LayerScale, MLP, MAP pooling, head) comes from the file; `builder_args` are
    `VisionTransformer` arguments that override it or give what the file does not record:
    `num_heads` for timm files of a non-standard width, `approximate_gelu` (default: the
    format's own), `include_top`, `input_shape`, `classifier_activation`, ... Without a head
    the model returns the MAP-pooled features if the file has a MAP head, a CLIP image tower's
    projected class token (transformers' `get_image_features`, OpenCLIP's `encode_image`;
    `projection_dim=None`: before the projection) for a CLIP checkpoint, else the tokens.
    `force_download`: fetch a named checkpoint's file again.
    """
    ckpt = weights_checkpoint(source, num_heads=builder_args.get("num_heads"), force_download=force_download)
    return vit_of_checkpoint(ckpt, **builder_args)


def vit_of_checkpoint(ckpt, **builder_args):
    """The Vision Transformer of the canonical checkpoint `ckpt` (`weights_checkpoint`), its weights loaded."""
    args = dict(
        ckpt.architecture(),
        include_top=ckpt.classes is not None,
        classes=ckpt.classes or 1000,
        pooling="map" if ckpt.head_pooling == "map" else ckpt.pooling,
    )
    args.update(builder_args)
    return VisionTransformer(**args, weights=ckpt)
