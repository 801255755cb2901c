"""`keras-vit train | pretrain`."""

import os
import sys

from keras_vit import run_folder
from keras_vit.config import fields
from keras_vit.training.recipes import RECIPES, TrainConfig, check_recipe_command, recipe


# How a run with other settings starts anew, in command-line terms (`SettingsChanged`).
RESTART = "start a new run with another --output-dir (or --fresh to start this one over)"


def config_from_args(args, command="train"):
    """The `TrainConfig` of parsed `train` / `pretrain` arguments: the recipe with the flags
    given (already parsed) and `--set` applied; raises ValueError for a bad combination (or a
    recipe of the other command), before anything heavy is imported."""
    check_recipe_command(args.recipe, command)
    overrides = {name: value for name, value in vars(args).items() if name in TrainConfig.__dataclass_fields__}
    return recipe(args.recipe, **overrides).override(args.set or [])


def _run(command, run, config, args):
    """`(exit code, result)` of `run(config)` as the command line runs it: exit 3 where training
    diverged, a change of settings said in command-line terms; no result where this process is
    not the one that reports (or it diverged)."""
    from keras_vit.training import TrainingDiverged
    from keras_vit.training.checkpointing import SettingsChanged

    try:
        result = run(config, resume=not args.fresh, overwrite_output_dir=args.overwrite_output_dir)
    except TrainingDiverged as error:
        print(f"keras-vit {command}: {error}", file=sys.stderr)
        return 3, None
    except SettingsChanged as error:  # say it in command-line terms
        raise SettingsChanged(error.run_dir, error.changes, RESTART) from None
    return 0, result if result.is_chief else None  # only the process that wrote the files reports them


def _train(args):
    config = config_from_args(args)
    from keras_vit.training import train

    code, result = _run("train", train, config, args)
    if result is None:
        return code
    epoch = f" (epoch {result.best_epoch})" if result.best_epoch else ""
    scores = getattr(result, "scores", None)  # a dense task's (`keras_vit.training.dense`)
    measured = (", ".join(f"{name} {value:.4f}" for name, value in scores.items()) if scores is not None else
                f"top-1 {result.top1:.4f}, top-5 {result.top5:.4f}, loss {result.val_loss:.4f}")
    print(
        f"\nValidation {measured} of the best model{epoch}; {_steps_run(result)} in {result.seconds:.0f} s "
        f"({result.precision}, strategy {result.strategy})."
    )
    run_dir = os.path.abspath(result.run_dir)
    print(f"Saved the best model to {os.path.abspath(result.best_path)} (last epoch: {os.path.abspath(result.final_path)}).")
    board = run_folder.path(run_dir, run_folder.TENSORBOARD)
    print(f"Logs: {run_folder.path(run_dir, run_folder.LOG)}" + (f", TensorBoard: {board}" if os.path.isdir(board) else ""))
    return 0


def _steps_run(result):
    """How many steps this process ran: all of them, or those after the step it resumed at."""
    if not result.resumed_from:
        return f"{result.steps} steps"
    return f"{result.steps - result.resumed_from} steps (resumed at step {result.resumed_from} of {result.steps})"


def _pretrain(args):
    config = config_from_args(args, "pretrain")
    from keras_vit.training.pretrain import pretrain

    code, result = _run("pretrain", pretrain, config, args)
    if result is None:
        return code
    print(
        f"\nMasked patch prediction: validation loss {result.val_loss:.4f}, accuracy on corrupted "
        f"patches {result.val_accuracy:.4f}; {_steps_run(result)} in {result.seconds:.0f} s."
    )
    print(f"Saved the encoder to {os.path.abspath(result.encoder_path)}: fine-tune it with "
          f"keras-vit train --weights {os.path.abspath(result.encoder_path)} (same architecture).")
    return 0


def _run_folder_flags(parser):
    parser.add_argument("--fresh", action="store_true",
                        help="start the run anew: remove what an earlier run wrote into the run directory")
    parser.add_argument("--overwrite-output-dir", action="store_true",
                        help="write the run into an --output-dir that holds other files (files of a run's names "
                        "in it are replaced)")


def register(subparsers):
    train = subparsers.add_parser(
        "train",
        help="train a ViT (no arguments: a small ViT on the digits data set)",
        description=(
            "Train with model.fit on the current Keras backend. Rerun the same command to resume "
            "after an interruption. Multi-process PyTorch: torchrun --nproc_per_node=N "
            "$(which keras-vit) train --strategy torch_ddp ..."
        ),
    )
    train.add_argument("--recipe", default="digits", choices=sorted(RECIPES), help="base recipe (default digits)")
    train.add_argument("--set", action="append", metavar="KEY=VALUE", help="override any option (repeatable)")
    _run_folder_flags(train)
    fields.add_flags(train, TrainConfig, skip=("recipe",))
    train.set_defaults(func=_train)

    pretrain = subparsers.add_parser(
        "pretrain",
        help="self-supervised masked patch prediction (no arguments: the digits-sized ViT on digits)",
        description=(
            "Pre-train a ViT encoder by masked patch prediction (paper 4.6) with model.fit on the "
            "current Keras backend; writes RUN/encoder.keras for keras-vit train --weights. Rerun "
            "the same command to resume."
        ),
    )
    pretrain.add_argument("--recipe", default="masked_patch_digits", choices=sorted(RECIPES),
                          help="base recipe (default masked_patch_digits; masked_patch: the paper's ViT-B/16)")
    pretrain.add_argument("--set", action="append", metavar="KEY=VALUE", help="override any option (repeatable)")
    _run_folder_flags(pretrain)
    fields.add_flags(pretrain, TrainConfig, skip=("recipe",))
    pretrain.set_defaults(func=_pretrain)
