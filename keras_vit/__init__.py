"""keras_vit: the Vision Transformer (Dosovitskiy et al., 2021) for Keras 3.

Runs on TensorFlow, JAX and PyTorch; the backend is chosen with `KERAS_BACKEND`.
`import keras_vit` registers the layers with `keras.saving`; the other names are imported on
first use. The `keras-vit` command line skips that registration until a command needs a
model, so that `--help` and `list-models` start without Keras (and TensorFlow).
"""

import os
import sys

from keras_vit.families import FAMILIES, HYBRIDS, VARIANTS
from keras_vit.variants import list_models
from keras_vit.utils.lazy_imports import lazy_package

__version__ = "0.1.0"

_EXPORTS = {
    "layers": "keras_vit.layers",
    "weights": "keras_vit.weights",
    "list_weights": "keras_vit.weights",
    "features": "keras_vit.inspect.features",
    "feature_extractor": "keras_vit.inspect.features",
    "from_checkpoint": "keras_vit.dense.reading",
    "DenseModel": "keras_vit.dense.model",
    "naflex_inputs": "keras_vit.data.naflex_inputs",
    "ImageTextModel": "keras_vit.text.image_text",
    "text": "keras_vit.text",
    **dict.fromkeys([*VARIANTS, *HYBRIDS, *FAMILIES, "VARIANTS", "VisionTransformer", "decode_predictions",
                     "preprocess_input"], "keras_vit.applications"),
}
__all__ = ["list_models"]
lazy_package(__name__, _EXPORTS)


def _command_line():
    """Whether this process is the `keras-vit` script (also under torchrun)."""
    script = os.path.basename(getattr(sys, "argv", [""])[0] or "")
    return os.path.splitext(script)[0] == "keras-vit"


if not _command_line():
    from keras_vit import model  # noqa: F401  (registers the layers and the model class for keras.saving.load_model)
    from keras_vit.dense import eomt as _eomt, layers as _dense_layers  # noqa: F401  (and the dense heads)
    from keras_vit.dense import losses as _dense_losses  # noqa: F401  (and the losses a dense run compiles with)
