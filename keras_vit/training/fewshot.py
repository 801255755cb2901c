"""Few-shot linear evaluation (paper Section 4.1, big_vision's `fewshot_lsr` evaluator).

The frozen representation of `shots` training images per class is mapped to `{-1, 1}^K`
targets by a closed-form ridge regression; the accuracy of its argmax on the validation
split is reported per shot count and seed. As in the paper's code: features standardised
with the few-shot set's mean and standard deviation, a constant feature of 100 as the bias
(so almost unregularised), a fixed `l2 = 2**10`, seeds 0, 1, 2 each drawing its own shots.

    from keras_vit.training import fewshot
    scores = fewshot.evaluate(model, "digits", shots=(1, 5, 10))   # {"1shot": 0.41, ...}
"""

import csv
import io
import os

import keras
import numpy as np

from keras_vit import run_folder
from keras_vit.files import append_text
from keras_vit.training import ema

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


def source_features(representation, source, image_size, batch_size=128, crop_fraction=1.0):
    """`(train features, train labels, validation features, validation labels)` of a `Source`."""
    from keras_vit.training import pipeline

    splits = [
        extract(representation, pipeline.eval_dataset(source, image_size, batch_size, crop_fraction=crop_fraction, split=s))
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
    from keras_vit.training.data import Source, load_source

    check_shots(shots)
    source = data if isinstance(data, Source) else load_source(data, **source_options)
    size = image_size or image_size_of(model)
    arrays = source_features(representation_model(model, layer, pooling), source, size, batch_size, crop_fraction)
    results = fewshot_accuracy(*arrays, shots=shots, seeds=seeds, l2=l2)
    return results if per_seed else summarise(results)


class FewShotCallback(keras.callbacks.Callback):
    """Runs the few-shot evaluation of `model` (the network being trained, or the encoder
    inside it) every `every` training steps and at the end of training (the shot counts
    the smallest class has images for), and logs it: the
    mean accuracy per shot count goes into the epoch logs (so `CSVLogger` and `TensorBoard`
    callbacks after this one record the latest value as `fewshot_1shot`, ...), and each
    evaluation is a row of `log_dir/fewshot.csv` and a TensorBoard scalar in
    `log_dir/tensorboard/fewshot`."""

    def __init__(self, model, source, *, every, shots=SHOTS, seeds=SEEDS, l2=L2, layer=None, image_size=None,
                 batch_size=128, log_dir=None, tensorboard=True):
        super().__init__()
        if isinstance(every, bool) or not isinstance(every, int) or every < 1:
            raise ValueError(f"every={every!r} must be a whole number of steps >= 1.")
        check_shots(shots)
        self.network, self.source, self.every = model, source, every
        self.shots, self.seeds, self.l2, self.layer, self.batch_size = tuple(shots), seeds, l2, layer, batch_size
        self.image_size = image_size or image_size_of(model)
        self.log_dir, self.tensorboard = log_dir, tensorboard
        self.latest, self.last_step, self._representation = {}, None, None

    def _step(self):
        return int(keras.ops.convert_to_numpy(self.model.optimizer.iterations))

    def run(self, step):
        if self._representation is None:
            self._representation = representation_model(self.network, self.layer)
        with ema.averaged(self.model):  # the weight average, if the run keeps one
            arrays = source_features(self._representation, self.source, self.image_size, self.batch_size)
        smallest = int(np.bincount(arrays[1]).min())  # the shot counts the data has images for
        shots = [k for k in self.shots if k <= smallest] or [smallest]
        self.latest = summarise(fewshot_accuracy(*arrays, shots=shots, seeds=self.seeds, l2=self.l2))
        self.last_step = step
        if self.log_dir:
            self._write(step)
        return self.latest

    def _write(self, step):
        header, row = io.StringIO(), io.StringIO()
        csv.writer(header).writerow(["step", *self.latest])
        csv.writer(row).writerow([step, *(f"{v:.6f}" for v in self.latest.values())])
        append_text(run_folder.path(self.log_dir, run_folder.FEWSHOT), row.getvalue(), header.getvalue())
        if self.tensorboard:
            import tensorflow as tf

            writer = tf.summary.create_file_writer(os.path.join(self.log_dir, run_folder.TENSORBOARD, "fewshot"))
            with writer.as_default():
                for name, value in self.latest.items():
                    tf.summary.scalar(f"fewshot_{name}", value, step=step)
            writer.close()

    def on_train_batch_end(self, batch, logs=None):
        step = self._step()
        if step % self.every == 0 and step != self.last_step:
            self.run(step)

    def on_epoch_end(self, epoch, logs=None):
        if not self.latest:  # the first epoch's logs name the columns of log.csv
            self.run(self._step())
        if logs is not None:
            logs.update({f"fewshot_{name}": value for name, value in self.latest.items()})

    def on_train_end(self, logs=None):
        step = self._step()
        if step != self.last_step:
            self.run(step)


def config_callbacks(config, source, model, log_dir):
    """The `FewShotCallback` a `TrainConfig` asks for (`fewshot_every` > 0), as a list."""
    if not config.fewshot_every:
        return []
    return [FewShotCallback(model, source, every=config.fewshot_every, image_size=config.image_size,
                            log_dir=log_dir, tensorboard=config.tensorboard)]


def command(args):
    """`keras-vit evaluate MODEL --fewshot 1,5,10,25`: prints the accuracy per shot count."""
    from keras_vit.inference.predict import recorded_source
    from keras_vit.run_folder import load_model, metadata

    shots = parse_shots(args.fewshot)
    if args.seeds < 1:
        raise ValueError(f"--seeds {args.seeds} must be >= 1.")
    model, _, crop = load_model(args.model)
    options = {"data_dir": args.data_dir} if args.data_dir else {}
    source = recorded_source(args.model, args.data, **options)
    size = metadata(args.model).get("classes", {}).get("image_size")
    results = evaluate(model, source, shots=shots, seeds=args.seeds, layer=args.layer, image_size=image_size_of(model, size),
                       batch_size=args.batch_size, crop_fraction=crop, per_seed=True)
    where = "pre-logits" if args.layer is None else f"block {args.layer}"
    print(f"{args.model}: few-shot linear accuracy ({where}, l2 {L2:g}) on {source.validation_size} validation "
          f"examples of {source.name}, mean ± std over {args.seeds} seed(s):")
    for k, accuracies in results.items():
        print(f"  {k:>3}-shot  {np.mean(accuracies):.4f} ± {np.std(accuracies):.4f}")
    return 0
