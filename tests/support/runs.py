"""Training-run helpers of the tests: the weights after every step, a run killed at a step, the
weights of a saved model by variable path, and a teacher to distil from."""

import keras
import numpy as np


def weights_by_path(model):
    return {v.path: np.array(keras.ops.convert_to_numpy(v)) for v in model.weights}


def saved_weights(path):
    """`{variable path: array}` of the `.keras` file at `path`."""
    return weights_by_path(keras.saving.load_model(path, compile=False))


def save_teacher(folder):
    """Saves a 10-class teacher of another width (24) at 16 px (twice the distributed tests'
    students), with random weights large enough for confident predictions (a distillation loss
    near 1, not near 0), as `folder`/teacher.keras; returns its path as a string."""
    import keras_vit

    from tests.support.models import randomize

    keras.utils.set_random_seed(0)
    teacher = keras_vit.VisionTransformer(4, 24, 1, 2, 48, input_shape=(16, 16, 3), classes=10, weights=None)
    randomize(teacher, seed=1, scale=1.0)
    path = str(folder / "teacher.keras")
    teacher.save(path)
    return path


class EveryStep(keras.callbacks.Callback):
    """Records the trainable weights (by path) after every training step (under JAX, Keras
    syncs the variables when a callback reads `self.model`); raises
    `KeyboardInterrupt` (a kill) after step `kill_after` if given."""

    def __init__(self, kill_after=None):
        super().__init__()
        self.kill_after, self.steps = kill_after, []

    def on_train_batch_end(self, batch, logs=None):
        self.steps.append({v.path: np.array(keras.ops.convert_to_numpy(v)) for v in self.model.trainable_weights})
        if len(self.steps) == self.kill_after:
            raise KeyboardInterrupt("simulated kill")


def exponential_average(values, decay):
    """NumPy: `a_1 = v_1`, `a_n = decay * a_(n-1) + (1 - decay) * v_n` over the list `values`."""
    average = np.asarray(values[0], np.float64)
    for value in values[1:]:
        average = decay * average + (1 - decay) * np.asarray(value, np.float64)
    return average
