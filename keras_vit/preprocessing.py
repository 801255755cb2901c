"""How each checkpoint family expects its images: the per-channel mean and standard deviation of
`(pixels / 255 - mean) / std`, the resize interpolation and the evaluation crop (the short side
resized to `size / crop_fraction`, then the central square). Each family declares its own in its
family file (`keras_vit.families`); this is the lookup.

Plain Python, no Keras. A model records the name of its entry (`model.preprocessing`);
`preprocess_input`, `predict`, the input-range guard and the Hugging Face / KerasHub exports
read it from there.
"""

from keras_vit.families import PREPROCESSING
from keras_vit.families.records import (  # noqa: F401  (part of this module's interface)
    CLIP_MEAN, CLIP_STD, HALF, IMAGENET_MEAN, IMAGENET_STD, Preprocessing,
)

DEFAULT = "vit"


def check_name(name):
    """Raises ValueError (one line) unless `name` is an entry of `PREPROCESSING`."""
    if not isinstance(name, str) or name not in PREPROCESSING:
        raise ValueError(f"Unknown preprocessing={name!r}; expected one of {tuple(PREPROCESSING)}.")


def preprocessing(name=None):
    """The `Preprocessing` called `name` (None: the paper's, "vit"); a model gives its own."""
    name = DEFAULT if name is None else getattr(name, "preprocessing", name)
    check_name(name)
    return PREPROCESSING[name]


def name_of(model):
    """The preprocessing name `model` records (`model.preprocessing`), else the default: a Keras
    model not built by keras_vit."""
    return getattr(model, "preprocessing", None) or DEFAULT
