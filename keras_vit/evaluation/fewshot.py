"""Few-shot linear evaluation (paper Section 4.1, big_vision's `fewshot_lsr` evaluator).

The frozen representation of `shots` training images per class is mapped to `{-1, 1}^K`
targets by a closed-form ridge regression; the accuracy of its argmax on the validation
split is reported per shot count and seed. As in the paper's code: features standardised
with the few-shot set's mean and standard deviation, a constant feature of 100 as the bias
(so almost unregularised), a fixed `l2 = 2**10`, seeds 0, 1, 2 each drawing its own shots.

    from keras_vit.evaluation import fewshot
    scores = fewshot.evaluate(model, "digits", shots=(1, 5, 10))   # {"1shot": 0.41, ...}
"""

import keras
import numpy as np

from keras_vit.config.fields import check_count
from keras_vit.preprocessing import name_of


SHOTS = (1, 5, 10, 25)
SEEDS = 3
L2 = 2.0**10
BIAS = 100.0
STD_EPSILON = 1e-5


def _standardise(x, mean, std):
    x = (x - mean) / std
    return np.concatenate([x, np.full((len(x), 1), BIAS)], axis=1)


def ridge_classifier(x, y, num_classes, l2=L2):
    """`predict(features) -> labels` of the ridge regression of `x` (n x d) onto the ±1 codes
    of the labels `y`: `W = (X^T X + l2 I)^-1 X^T Y`, solved in its dual form when n < d."""
    x = np.asarray(x, np.float64)
    mean, std = x.mean(axis=0), x.std(axis=0) + STD_EPSILON
    xs = _standardise(x, mean, std)
    targets = 2.0 * np.eye(num_classes)[np.asarray(y)] - 1.0
    n, d = xs.shape
    if n >= d:
        w = np.linalg.solve(xs.T @ xs + l2 * np.eye(d), xs.T @ targets)
    else:
        w = xs.T @ np.linalg.solve(xs @ xs.T + l2 * np.eye(n), targets)
    return lambda features: np.argmax(_standardise(np.asarray(features, np.float64), mean, std) @ w, axis=1)


def fewshot_accuracy(train_features, train_labels, test_features, test_labels, shots=SHOTS, seeds=SEEDS, l2=L2):
    """`{shots: [accuracy of seed 0, 1, ...]}`: for each seed, a random order of each class's
    training examples, whose first `shots` fit the ridge classifier tested on the test set."""
    train_labels, test_labels = np.asarray(train_labels), np.asarray(test_labels)
    num_classes = int(max(train_labels.max(), test_labels.max())) + 1
    counts = np.bincount(train_labels, minlength=num_classes)
    check_shots(shots, int(counts.min()))
    results = {k: [] for k in shots}
    for seed in range(seeds):
        rng = np.random.default_rng(seed)
        orders = [rng.permutation(np.flatnonzero(train_labels == c)) for c in range(num_classes)]
        for k in shots:
            chosen = np.concatenate([order[:k] for order in orders])
            predict = ridge_classifier(train_features[chosen], train_labels[chosen], num_classes, l2)
            results[k].append(float(np.mean(predict(test_features) == test_labels)))
    return results


def check_shots(shots, available=None):
    """Raises a ValueError unless `shots` are whole numbers >= 1 (and at most `available`)."""
    bad = [k for k in shots if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1]
    if not len(shots) or bad:
        raise ValueError(f"shots={tuple(shots)!r} must be whole numbers >= 1 (training images per class).")
    if available is not None and max(shots) > available:
        raise ValueError(f"{max(shots)}-shot needs {max(shots)} training images per class; the smallest class has {available}.")


def parse_shots(text):
    """"1,5,10" -> (1, 5, 10), or a ValueError."""
    try:
        shots = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise ValueError(f"--fewshot {text!r} must be shot counts separated by commas, e.g. 1,5,10,25.") from None
    check_shots(shots)
    return shots


def representation_model(model, layer=None, pooling=None):
    """The model from images to one feature vector per image that the regression reads.

    `layer` None: the pre-logits (the input of the `head`, after `pre_logits` if there is
    one), or the model's output if it has no head (pooled tokens are pooled again with
    `pooling`). `layer` an index: the tokens after that encoder block (see
    `keras_vit.features`), pooled. `pooling`: "token" (class token) or "avg" (mean of the
    patch tokens); default the model's own (`pooling` layer), else "token".
    """
    from keras_vit.inspect.features import feature_extractor
    from keras_vit.layers.pooling import POOLINGS, TokenPooling

    if pooling is None:
        own = next((lay for lay in model.layers if isinstance(lay, TokenPooling)), None)
        pooling = own.mode if own is not None else "token"
    if pooling not in POOLINGS:
        raise ValueError(f"pooling={pooling!r}; expected one of {POOLINGS}.")
    if layer is not None:
        tokens = feature_extractor(model, layer).output
    elif "head" in (lay.name for lay in model.layers):
        return keras.Model(model.input, model.get_layer("head").input, name=f"{model.name}_pre_logits")
    else:
        tokens = model.output
    if len(tokens.shape) == 2:
        return keras.Model(model.input, tokens)
    return keras.Model(model.input, TokenPooling(pooling, name="fewshot_pooling")(tokens))


def extract(representation, dataset):
    """`(features, labels)` as NumPy arrays over a dataset of `(images, labels)` batches."""
    features, labels = [], []
    for images, batch_labels in dataset.as_numpy_iterator():
        features.append(keras.ops.convert_to_numpy(representation(images, training=False)).astype(np.float32))
        labels.append(batch_labels)
    return np.concatenate(features), np.concatenate(labels)


def source_features(representation, source, image_size, batch_size=128, crop_fraction=1.0, preprocessing="vit"):
    """`(train features, train labels, validation features, validation labels)` of a `Source`,
    its images scaled by `preprocessing` (a model: its own)."""
    from keras_vit.data import pipeline

    splits = [
        extract(representation, pipeline.eval_dataset(source, image_size, batch_size, crop_fraction=crop_fraction,
                                                      split=s, preprocessing=preprocessing))
        for s in ("train", "validation")
    ]
    return (*splits[0], *splits[1])


def summarise(results):
    """`{"1shot": mean accuracy over the seeds, ...}`."""
    return {f"{k}shot": float(np.mean(v)) for k, v in results.items()}


def image_size_of(model, default=None):
    height, width = model.inputs[0].shape[1:3]
    if height is None or height != width:
        if default is None:
            raise ValueError(f"The model takes {model.inputs[0].shape[1:]} images; give image_size.")
        return default
    return int(height)


def evaluate(model, data, *, shots=SHOTS, seeds=SEEDS, l2=L2, layer=None, pooling=None, image_size=None,
             batch_size=128, crop_fraction=1.0, per_seed=False, **source_options):
    """Few-shot accuracy of `model`'s frozen representation on `data` (anything
    `keras_vit.training.load_source` reads; `source_options` go to it): the shots are drawn
    from its train split, the accuracy measured on its validation split. Returns the mean
    over the seeds `{"1shot": ..., ...}`, or with `per_seed` `{shots: [per seed]}`."""
    from keras_vit.data.sources import Source, load_source

    check_shots(shots)
    check_count("batch_size", batch_size, "images run at a time")
    source = data if isinstance(data, Source) else load_source(data, **source_options)
    size = image_size or image_size_of(model)
    arrays = source_features(representation_model(model, layer, pooling), source, size, batch_size, crop_fraction,
                             preprocessing=name_of(model))
    results = fewshot_accuracy(*arrays, shots=shots, seeds=seeds, l2=l2)
    return results if per_seed else summarise(results)
