"""`VisionTransformerModel`, the class of every keras_vit model, and its input-range guard: a
model warns, once, when the images it is given are clearly not preprocessed as its weights expect.

Every keras_vit model expects `keras_vit.preprocess_input(pixels, model)`: RGB pixels scaled
from 0-255 as its weights were trained (`model.preprocessing`: [-1, 1] for the paper's, ImageNet
mean / std for DeiT and DINOv2). On the first `predict`, `fit` or `evaluate` with arrays or
tensors, the model looks at the first batch and, if it is clearly 0-255 pixels or, mapped back
to [-1, 1] units by the model's own scaling, in another range ([0, 1] intensities, ImageNet
mean / std normalisation, [-1, 1] scaled twice, BGR channel order), warns in one line with the
fix. A NaFlex batch is judged by its images' patches (not the padding), after `naflex.check_batch`
refuses one whose parts do not fit together. `model.check_inputs = False` or `KERAS_VIT_CHECK_INPUTS=0` turns it off.
"""

import os
import warnings

import keras
import numpy as np

from keras_vit.data.naflex_inputs import check_batch
from keras_vit.preprocessing import DEFAULT, preprocessing
# The mean of the red channel minus the blue one of natural photos in [-1, 1] units is about
# +0.16 (ImageNet); BGR input shows the opposite sign. Only a batch this large is judged.
BGR_MARGIN = 0.12
BGR_MIN_IMAGES = 16


class InputRangeWarning(UserWarning):
    """The images given to a model are not in the range its weights expect."""


def diagnose(images, preprocessing=DEFAULT):
    """The one-line problem and fix for a batch of images `(batch, height, width, 3)` given
    to a model whose inputs are scaled by `preprocessing` (a name of `keras_vit.preprocessing`),
    or None when it looks right (or cannot be judged). 0-255 pixels are recognised as given;
    the rest is judged after mapping the batch to the [-1, 1] units of the paper's scaling."""
    x = np.asarray(images, dtype=np.float32)
    if x.ndim != 4 or x.shape[-1] != 3 or not x.size or not np.all(np.isfinite(x)):
        return None
    low, high = float(x.min()), float(x.max())
    if high > 2.0 and low >= -1e-3:
        return (f"the images are in [{low:.3g}, {high:.4g}], like 0-255 pixels; apply "
                "keras_vit.preprocess_input(images, model) first")
    if preprocessing != DEFAULT:
        x = _in_default_units(x, preprocessing)
        low, high = float(x.min()), float(x.max())
    if -3.0 < low < -1.2 and 1.2 < high < 3.5:
        return (f"the images are in [{low:.3g}, {high:.3g}], like ImageNet mean / std normalisation; "
                "give the 0-255 pixels to keras_vit.preprocess_input instead")
    if high > 3.5 or low < -3.0:
        return f"the images are in [{low:.4g}, {high:.4g}], far outside [-1, 1]; give RGB pixels to keras_vit.preprocess_input"
    if low >= -1.01 and high <= -0.95:
        return (f"the images are in [{low:.4g}, {high:.4g}], like [-1, 1] images scaled by "
                "keras_vit.preprocess_input a second time; apply it once")
    if low >= 0.0 and high <= 1.0 and high > 0.5:
        return f"the images are in [{low:.3g}, {high:.3g}], like [0, 1] intensities; give images * 2 - 1"
    if len(x) >= BGR_MIN_IMAGES and low >= -1.01 and high <= 1.01:
        means = x.mean(axis=(0, 1, 2))
        if means[2] - means[0] > BGR_MARGIN:
            return ("the blue channel is much brighter than the red one on average, like BGR images; "
                    "give RGB (images[..., ::-1])")
    return None


def _expected(name):
    spec = preprocessing(name)
    if name == DEFAULT:
        return "RGB in [-1, 1] (keras_vit.preprocess_input: (pixels - 127.5) / 127.5)"
    return (f"RGB scaled as its {name!r} weights (keras_vit.preprocess_input(pixels, model): "
            f"(pixels / 255 - {spec.mean}) / {spec.std})")


def _in_default_units(x, name):
    """`x`, scaled by the preprocessing `name`, as the paper's [-1, 1] scaling gives the same pixels."""
    spec = preprocessing(name)
    pixels = x * np.asarray(spec.scale, np.float32) + np.asarray(spec.offset, np.float32)
    return (pixels - np.float32(127.5)) / np.float32(127.5)


def _enabled(model):
    return getattr(model, "check_inputs", True) and os.environ.get("KERAS_VIT_CHECK_INPUTS", "1") != "0"


def check_first_batch(model, x, batch_size=None):
    """Warns (once per model) if the first batch of `x` (an array or a tensor; datasets and
    generators are not looked at) is clearly not what the model expects."""
    if isinstance(x, dict) and "patches" in x:  # a NaFlex batch: checked whole, every time (one line)
        patches, _, mask = check_batch({key: keras.ops.convert_to_numpy(value) for key, value in x.items()})
        images = patches[mask != 0]  # its patches as tiny images, the padding left out
        x = images.reshape(len(images), -1, 1, 3) if images.shape[-1] % 3 == 0 else None
    if getattr(model, "_inputs_checked", False) or not _enabled(model):
        return
    if isinstance(x, (list, tuple, dict)) or not hasattr(x, "shape") or not hasattr(x, "dtype"):
        return
    model._inputs_checked = True
    batch = x[: batch_size or 32]
    name = getattr(model, "preprocessing", DEFAULT)
    problem = diagnose(keras.ops.convert_to_numpy(batch), name)
    if problem:
        warnings.warn(
            f"{model.name} expects {_expected(name)}, but {problem} (model.check_inputs = False turns this check off).",
            InputRangeWarning,
            stacklevel=3,
        )


@keras.saving.register_keras_serializable(package="keras_vit")
class VisionTransformerModel(keras.Model):
    """The functional model of every keras_vit builder: a `keras.Model` whose `predict`,
    `fit` and `evaluate` first run `check_first_batch` (see the module docstring)."""

    check_inputs = True
    preprocessing = DEFAULT  # the name of the scaling its inputs get (`keras_vit.preprocessing`)

    def get_config(self):
        config = super().get_config()
        if self.preprocessing != DEFAULT:
            config["preprocessing"] = self.preprocessing
        return config

    @classmethod
    def from_config(cls, config, custom_objects=None):
        config = dict(config)
        name = config.pop("preprocessing", DEFAULT)
        model = super().from_config(config, custom_objects=custom_objects)
        model.preprocessing = name
        return model

    def predict(self, x, batch_size=None, *args, **kwargs):
        check_first_batch(self, x, batch_size)
        return super().predict(x, batch_size, *args, **kwargs)

    def fit(self, x=None, y=None, batch_size=None, *args, **kwargs):
        check_first_batch(self, x, batch_size)
        return super().fit(x, y, batch_size, *args, **kwargs)

    def evaluate(self, x=None, y=None, batch_size=None, *args, **kwargs):
        check_first_batch(self, x, batch_size)
        return super().evaluate(x, y, batch_size, *args, **kwargs)
