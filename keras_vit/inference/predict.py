"""Evaluate a trained model on a dataset (with `tf.data`), and classify image files with it
(NumPy image loading: no TensorFlow on JAX and PyTorch)."""

import keras
import numpy as np

from keras_vit.data import images
from keras_vit.data.imagenet import check_top, preprocess_input
from keras_vit.preprocessing import preprocessing as preprocessing_of
from keras_vit.run_folder import load_model
from keras_vit.evaluation.classification import naflex_budget, square_size
from keras_vit.model.logits import ends_with_softmax
from keras_vit.inspect.model_parts import is_naflex
from keras_vit.data.naflex_inputs import naflex_inputs



def _read(path, prepare=lambda pixels: pixels):
    try:
        return prepare(images.read_image(path))
    except ValueError as error:
        message = str(error)
        raise ValueError(message if message.startswith(str(path)) else f"{path}: {message}") from None


def _crop(path, image_size, crop_fraction, interpolation):
    return _read(path, lambda pixels: images.center_crop(pixels, image_size, crop_fraction, interpolation))


def _batch(model, paths, size, crop_fraction, max_num_patches):
    """The model's input for image files: a centred square, or NaFlex's patches of the whole image
    under `max_num_patches`."""
    if is_naflex(model):
        return naflex_inputs([_read(path) for path in paths], model, max_num_patches=max_num_patches)
    return load_images(paths, size, crop_fraction, preprocessing=model)


def load_images(paths, image_size, crop_fraction=1.0, preprocessing=None):
    """Image files -> a `(N, size, size, 3)` float32 batch scaled by `preprocess_input(...,
    preprocessing)` (default [-1, 1]): the validation pipeline's decoding, resize (with the
    preprocessing's interpolation) and centre crop (`keras_vit.data.images`), without TensorFlow."""
    interpolation = preprocessing_of(preprocessing).interpolation
    pixels = np.stack([_crop(path, image_size, crop_fraction, interpolation) for path in paths])
    return preprocess_input(pixels, preprocessing=preprocessing)


# Images decoded and run together by `predict`: memory stays that of one batch.
PREDICT_BATCH = 32


def predict(model, paths, *, class_names=None, top=5, crop_fraction=1.0, batch_size=PREDICT_BATCH, model_path=None):
    """For each image file, the `top` classes (all of them at most) as `(index, name, probability)`,
    decoding and running `batch_size` images at a time, scaled by the model's preprocessing (a
    NaFlex model's: each whole image at its aspect ratio under `naflex_budget(model,
    model_path)`, the budget of the run that saved `model_path`; `crop_fraction` unused)."""
    check_top(top)
    naflex = is_naflex(model)
    size, results = None if naflex else square_size(model), []
    budget = naflex_budget(model, model_path) if naflex else None
    for start in range(0, len(paths), batch_size):
        batch = _batch(model, paths[start : start + batch_size], size, crop_fraction, budget)
        probs = keras.ops.convert_to_numpy(model.predict(batch, verbose=0))
        if not ends_with_softmax(model):
            probs = keras.ops.convert_to_numpy(keras.ops.softmax(probs, axis=-1))
        for row in probs:
            best = np.argsort(row)[::-1][:top]
            results.append([(int(i), class_names[i] if class_names else str(i), float(row[i])) for i in best])
    return results
