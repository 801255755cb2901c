"""Training ViTs with `model.fit` on TensorFlow, JAX and PyTorch.

    from keras_vit import training
    result = training.train("digits")                      # the quick default
    result = training.train("finetune", data="cifar10", weights="...", learning_rate=0.01)
    result = training.pretrain("masked_patch_digits")     # self-supervised: result.encoder_path

Names are imported on first use, so `keras_vit.training.recipes` alone needs no TensorFlow.
"""

from keras_vit.utils.lazy_imports import lazy_package

_EXPORTS = {
    "TrainingDiverged": "keras_vit.training.checkpointing",
    "DatasetUnavailableError": "keras_vit.data.sources",
    "Source": "keras_vit.data.sources",
    "load_source": "keras_vit.data.sources",
    "Augmentation": "keras_vit.data.pipeline",
    "eval_dataset": "keras_vit.data.pipeline",
    "train_dataset": "keras_vit.data.pipeline",
    "PretrainResult": "keras_vit.training.pretrain",
    "pretrain": "keras_vit.training.pretrain",
    "RECIPES": "keras_vit.training.recipes",
    "TrainConfig": "keras_vit.training.recipes",
    "recipe": "keras_vit.training.recipes",
    "TrainResult": "keras_vit.training.trainer",
    "build_model": "keras_vit.training.trainer",
    "train": "keras_vit.training.trainer",
}
lazy_package(__name__, _EXPORTS)
