"""Training ViTs with `model.fit` on TensorFlow, JAX and PyTorch.

    from keras_vit import training
    result = training.train("digits")                      # the quick default
    result = training.train("finetune", data="cifar10", weights="...", learning_rate=0.01)
    result = training.pretrain("masked_patch_digits")     # self-supervised: result.encoder_path
"""

from keras_vit.training.checkpointing import TrainingDiverged
from keras_vit.training.data import DatasetUnavailableError, Source, load_source
from keras_vit.training.pipeline import Augmentation, eval_dataset, train_dataset
from keras_vit.training.pretrain import PretrainResult, pretrain
from keras_vit.training.recipes import RECIPES, TrainConfig, recipe
from keras_vit.training.trainer import TrainResult, build_model, train

__all__ = [
    "RECIPES",
    "Augmentation",
    "DatasetUnavailableError",
    "PretrainResult",
    "Source",
    "TrainConfig",
    "TrainResult",
    "TrainingDiverged",
    "build_model",
    "eval_dataset",
    "load_source",
    "pretrain",
    "recipe",
    "train",
    "train_dataset",
]
