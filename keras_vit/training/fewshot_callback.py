"""The training callback that runs the few-shot evaluator (`keras_vit.evaluation.fewshot`)
every few steps and logs it in the run folder."""

import csv
import io
import os

import keras
import numpy as np

from keras_vit import run_folder
from keras_vit.evaluation.fewshot import (
    L2, SEEDS, SHOTS, check_shots, fewshot_accuracy, image_size_of, representation_model, source_features, summarise,
)
from keras_vit.preprocessing import name_of
from keras_vit.utils.files import append_text
from keras_vit.training import ema


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
            arrays = source_features(self._representation, self.source, self.image_size, self.batch_size,
                                     preprocessing=name_of(self.network))
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
                            log_dir=log_dir, tensorboard=config.writes_tensorboard)]
