"""`pretrain()`: masked patch prediction with `model.fit`, writing an encoder checkpoint.

The run directory (`runs/RECIPE` or `output_dir`) gets `encoder.keras` (the encoder after the
last step: a keras_vit ViT without head, which `weights=` of any builder or recipe loads),
`best.keras` (the encoder of the epoch with the lowest validation loss), the resumable
`checkpoint/`, `config.json` and `log.csv`, as `train()` does.

The task: the encoder inside the masked-patch-prediction model, its loss on the corrupted
patches, batches corrupted on the fly, the objective's settings shared on resume. The rest is
the run engine's.
"""

import dataclasses
import math

import keras

from keras_vit import run_folder
from keras_vit.training import engine, masked_patch


@dataclasses.dataclass
class PretrainResult:
    """What a pre-training run produced: the encoder (last step) and its validation figures."""

    encoder: keras.Model
    run_dir: str
    encoder_path: str
    val_loss: float
    val_accuracy: float  # of the mean-colour classes on corrupted patches (nan for pixels)
    history: dict
    steps: int
    resumed_from: int
    seconds: float
    is_chief: bool = True  # this process wrote the files (the others of a multi-process run did not)


def build_encoder(config):
    """The ViT of `config` without head (`include_top=False`, the whole token sequence)."""
    return engine.build_vit(config, include_top=False, pooling=None)


class MaskedPatchPrediction(engine.Task):
    """Masked patch prediction (paper 4.6): corrupt patches, predict their mean colour or pixels."""

    command = "pretrain"
    default_recipe = "masked_patch_digits"
    resume_fields = ("mask_rate", "mask_split", "mask_target", "color_bits")

    def setup(self, config, source, augmentation):
        encoder = build_encoder(config)
        model = masked_patch.build_pretraining_model(encoder, config.mask_target, config.color_bits)
        loss, metrics = masked_patch.loss_and_metrics(config.mask_target)
        patch = config.image_size // math.isqrt(encoder.get_layer("flatten").output.shape[1])

        def corrupt(batches, salt, start_step):
            return masked_patch.corrupt_batches(
                batches, patch, rate=config.mask_rate, split=config.mask_split, target=config.mask_target,
                bits=config.color_bits, seed=config.seed, salt=salt, start=start_step,
            )

        return engine.Setup(encoder, model, dict(loss=loss, weighted_metrics=metrics), transform=corrupt)

    def logged(self, config):
        return ("loss", "accuracy") if config.mask_target == "color" else ("loss",)

    def finish(self, run):
        encoder_path = run.save(run.setup.model, run_folder.ENCODER)
        results = run.evaluate()
        return PretrainResult(
            encoder=run.setup.model,
            run_dir=run.config.run_dir,
            encoder_path=encoder_path,
            val_loss=float(results["loss"]),
            val_accuracy=float(results.get("accuracy", math.nan)),
            history=run.history,
            steps=run.state.step,
            resumed_from=run.resumed_from,
            seconds=run.seconds,
            is_chief=run.plan.is_chief,
        )


def pretrain(config=None, *, data=None, callbacks=(), resume=True, overwrite_output_dir=False, **overrides):
    """Pre-trains a ViT encoder by masked patch prediction; returns a `PretrainResult`.

    Args:
        config: a `TrainConfig` or a recipe name ("masked_patch_digits" by default,
            "masked_patch" for the paper's ViT-B/16 set-up).
        data: optionally data instead of `config.data` (as for `train`; labels are ignored).
        callbacks: more Keras callbacks.
        resume: continue from the checkpoint in the run directory if there is one (False:
            start anew, removing what an earlier run wrote there).
        overwrite_output_dir: write into a run directory that holds files but no run, as `train`.
        **overrides: any `TrainConfig` field (`mask_rate`, `mask_split`, `mask_target`,
            `color_bits` set the objective).
    """
    return engine.run(MaskedPatchPrediction(), config, data=data, callbacks=callbacks, resume=resume,
                      overwrite_output_dir=overwrite_output_dir, **overrides)
