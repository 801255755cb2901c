"""EoMT (Kerssies et al., 2025): its preprocessing. Its segmentation models and their readers are
`keras_vit.dense` (no named builders)."""

from keras_vit.families.records import HUB, IMAGENET_MEAN, IMAGENET_STD, Preprocessing, WeightsEntry

PREPROCESSING = {
    # transformers EomtImageProcessor: ImageNet mean / std, bilinear resize, no crop.
    "eomt": Preprocessing(IMAGENET_MEAN, IMAGENET_STD, "bilinear", 1.0),
}

# tue-mps's EoMT checkpoints (MIT): DINOv2-L with 4 registers whose patch embedding EoMT resized to 16 px (no
# named builder: listed as "EoMTL16"), at their training sizes; read whole by `keras_vit.dense`.
DENSE = [
    WeightsEntry("EoMTL16", name, resolution, None, None, "safetensors", HUB.format(f"tue-mps/{name}"), license="mit",
                 preprocessing="eomt")
    for name, resolution in (("ade20k_semantic_eomt_large_512", 512), ("cityscapes_semantic_eomt_large_1024", 1024),
                             ("coco_panoptic_eomt_large_640", 640))
]
ENTRIES = DENSE
