"""The model's assembly: the functional Vision Transformer built from its `ViTConfig`
(`architecture.build_model`), the class of every keras_vit model and its input-range check
(`vision_transformer_model`), whether a classifier outputs logits or probabilities (`logits`)
and a NaFlex model run on packed batches (`packed`).

Importing the package registers the layers and the model class with `keras.saving`, so that
`keras.saving.load_model` reads keras_vit's `.keras` files.
"""

from keras_vit import layers  # noqa: F401  (registers the layers)
from keras_vit.model.vision_transformer_model import VisionTransformerModel  # noqa: F401  (and the model class)
