"""EoMT (Kerssies et al., 2025): its preprocessing. Its segmentation models and their readers are
`keras_vit.dense` (no named builders)."""

from keras_vit.families.records import IMAGENET_MEAN, IMAGENET_STD, Preprocessing

PREPROCESSING = {
    # transformers EomtImageProcessor: ImageNet mean / std, bilinear resize, no crop.
    "eomt": Preprocessing(IMAGENET_MEAN, IMAGENET_STD, "bilinear", 1.0),
}
