"""Dense training (`task="segmentation" | "depth"`): a `DenseModel` head on the config's ViT, through the engine.

The task says what differs from classification: the data (`keras_vit.dense.data` folders and the
paired pipelines of `keras_vit.dense.pipeline`), the model (`DenseModel(backbone, head=config.head)`;
the backbone frozen with `freeze_backbone`, its blocks scaled by `layer_decay`), the loss and metrics
(`keras_vit.dense.losses`: cross-entropy with the ignore label and `label_smoothing`, pixel accuracy and mIoU; SILog and δ1,
each logged as `accuracy` so that the default monitor `val_accuracy` applies). EoMT (`head="eomt"`) trains
a model of every prediction, its masks annealed over the run, with `keras_vit.dense.eomt_loss`. The run folder, resume,
precision and distribution are the engine's.
"""

import dataclasses

import keras

from keras_vit import run_folder
from keras_vit.dense import sources as dense_sources
from keras_vit.dense.eomt import OUTPUTS, eomt_training_model
from keras_vit.dense.eomt_loss import eomt_loss_and_metrics
from keras_vit.dense.losses import loss_and_metrics
from keras_vit.dense.model import DenseModel
from keras_vit.dense import pipeline as dense_pipeline
from keras_vit.inspect.model_parts import encoder_layer
from keras_vit.training import engine

# `TrainConfig.task` -> `DenseModel`'s task
DENSE_TASKS = {"segmentation": "semantic", "depth": "depth"}


@dataclasses.dataclass(kw_only=True)
class DenseResult(engine.RunResult):
    """What a dense run produced: the model (best weights), paths, its validation scores, history."""

    scores: dict  # the validation metrics of the best model: loss, accuracy (pixel accuracy or δ1), miou


def dpt_options(width):
    """Depth Anything's DPT head (fusion to the next map's size, output at the input size), its widths
    scaled with the ViT's: `width / 8 ... width` and `width / 6` (ViT-S 384: its 48, 96, 192, 384 and 64)."""
    return dict(neck_hidden_sizes=tuple(max(width // k, 4) for k in (8, 4, 2, 1)),
                fusion_hidden_size=max(width // 6, 8), fusion_resize="next", head_upsample="input")


def eomt_blocks(depth):
    """The blocks that see EoMT's queries on a ViT of `depth` blocks: a third of them, 1 to 4 (EoMT's
    ViT-S: 3 of 12, ViT-L: 4 of 24)."""
    return min(4, max(1, depth // 4))


def build_dense_model(config, num_classes=None, total_steps=1):
    """`(DenseModel, its ViT, the model that trains)` of `config`: its `head` on the config's ViT
    (pretrained if `weights`); EoMT's training model (`eomt_training_model`) anneals its masks over
    `total_steps` and outputs every prediction; the others train the model itself."""
    backbone = engine.build_vit(config, include_top=False)
    task = DENSE_TASKS[config.task]
    name = f"vit_{config.recipe}_{config.head}_{task}"
    if config.head == "eomt":
        model, training = eomt_training_model(backbone, num_classes, total_steps, name=name,
                                              num_blocks=eomt_blocks(encoder_layer(backbone).depth))
        return model, backbone, training
    options = dpt_options(backbone.output_shape[-1]) if config.head == "dpt" else {}
    model = DenseModel(backbone, head=config.head, task=task, num_classes=num_classes if task == "semantic" else None,
                       name=name, **options)
    return model, backbone, None


class DenseTraining(engine.Task):
    """Segmentation or depth, by `model` (a `DenseModel`) or the config's."""

    resume_fields = ("task", "head", "freeze_backbone")

    def __init__(self, model=None, source=None):
        self.model, self.source = model, source

    @classmethod
    def checked(cls, config, model=None, data=None):
        """The task with its data read and checked already, before the run folder is touched."""
        return cls(model, cls().load_source(config, data))

    def load_source(self, config, data):
        if self.source is not None:
            return self.source
        if data is not None and not isinstance(data, (str, bytes)) and not hasattr(data, "__fspath__"):
            raise ValueError(f"task={config.task} reads a data folder (DIR/images + DIR/masks or DIR/depth) or a "
                             f"tensorflow-datasets name, not {type(data).__name__}.")
        return dense_sources.load_source(config.data if data is None else data, DENSE_TASKS[config.task],
                                         **dense_sources.source_options(config.to_dict()))

    def batches(self, config, plan, source, augmentation, batch, setup):
        val_ds = dense_pipeline.eval_dataset(source, config.image_size, batch, pad_to_multiple=plan.pad_multiple,
                                             part=plan.part)

        def train_batches(start_step):
            return dense_pipeline.train_dataset(
                source, augmentation, batch, seed=config.seed, start=start_step * batch,
                shuffle_buffer=config.shuffle_buffer, shard=plan.shard, part=plan.part, deterministic=config.deterministic)

        return val_ds, train_batches

    def setup(self, config, source, augmentation):
        train_model = None
        if self.model is None:
            total = engine.schedule_steps(config, source.train_size)[2]
            model, backbone, train_model = build_dense_model(config, source.num_classes, total)
        else:  # its ViT's layers are those of its "backbone" part, whose blocks layer decay cannot tell apart
            model, backbone = self.model, None
            if config.layer_decay is not None:
                raise ValueError("layer_decay scales the blocks of the ViT the config builds; with a model given, "
                                 "set layer_decay=none.")
            if isinstance(model.output, dict):
                raise ValueError(f"{model.name} outputs {sorted(model.output)}; a given model trains with one "
                                 "per-pixel output (EoMT trains from the config: head=eomt).")
            shape = tuple(model.inputs[0].shape[1:3])
            if shape not in ((config.image_size,) * 2, (None, None)):
                raise ValueError(f"The model takes {tuple(model.inputs[0].shape[1:])} images but "
                                 f"image_size={config.image_size}.")
        if config.freeze_backbone:
            model.get_layer("backbone").trainable = False
        if train_model is None:
            loss, metrics = loss_and_metrics(DENSE_TASKS[config.task], source.num_classes, config.label_smoothing)
            # the same layers, compiled for training; the saved `model` stays uncompiled (no optimizer in its file)
            train_model = keras.Model(model.inputs, model.outputs, name=f"{model.name}_training")
        else:
            mask_size = tuple(model.output[OUTPUTS[1]].shape[2:4])
            loss, metrics = eomt_loss_and_metrics(source.num_classes, mask_size)
            # "auto" compiles with XLA on TensorFlow, where the host's matching (tf.numpy_function) cannot run
            train_model.supports_jit = keras.backend.backend() != "tensorflow"
        return engine.Setup(model, train_model, dict(loss=loss, metrics=metrics), backbone=backbone)

    def logged(self, config):
        return ("loss", "accuracy", "miou") if config.task == "segmentation" else ("loss", "accuracy")

    def metadata(self, config, source):
        classes = {"class_names": source.class_names or [], "image_size": config.image_size, "eval_crop": 1.0,
                   "task": DENSE_TASKS[config.task]}
        return {run_folder.CLASSES: classes}

    def finish(self, run):
        model, state = run.setup.model, run.state
        final_path = run.save(model, run_folder.FINAL)
        has_best = state.best is not None
        if has_best:
            model.load_weights(state.best_path)
        scores = {key: float(value) for key, value in run.evaluate().items()}
        return DenseResult(
            model=model, run_dir=run.config.run_dir, best_path=state.best_path if has_best else final_path,
            final_path=final_path, scores=scores, best_epoch=state.best_epoch or 0, history=run.history,
            steps=state.step, resumed_from=run.resumed_from, seconds=run.seconds, precision=run.precision,
            strategy=run.plan.name, is_chief=run.plan.is_chief,
        )
