"""`keras-vit train | pretrain | evaluate | predict | export`."""

import argparse
import dataclasses
import os
import sys
import typing

from keras_vit.training.recipes import CHOICES, FIELD_HELP, RECIPES, TrainConfig, parse_value, recipe

# What a free-form option's value is, for --help (the others show their type or choices).
METAVARS = {
    "data": "NAME|DIR|FILE", "data_dir": "DIR", "manual_dir": "DIR", "output_dir": "DIR",
    "train_split": "SPLIT", "val_split": "SPLIT", "weights": "NAME|PATH", "pooling": "token|avg",
    "monitor": "METRIC", "jit_compile": "auto|true|false", "verbose": "auto|0|1|2", "crop_area": "MIN,MAX",
    "crop_aspect": "MIN,MAX", "mask_split": "MASK,RANDOM,SAME",
}


def _config_from_args(args):
    """The recipe with the flags given (already parsed) and `--set` applied; raises
    ValueError for a bad combination, before anything heavy is imported."""
    overrides = {f.name: getattr(args, f.name) for f in dataclasses.fields(TrainConfig) if hasattr(args, f.name)}
    return recipe(args.recipe).replace(**overrides).override(args.set or [])


def _train(args):
    config = _config_from_args(args)
    from keras_vit.training import TrainingDiverged, train
    from keras_vit.training.checkpointing import SettingsChanged

    try:
        result = train(config, resume=not args.fresh)
    except TrainingDiverged as error:
        print(f"keras-vit train: {error}", file=sys.stderr)
        return 3
    except SettingsChanged as error:  # say it in command-line terms
        restart = "start a new run with another --output-dir (or --fresh to start this one over)"
        raise SettingsChanged(error.run_dir, error.changes, restart) from None
    if os.environ.get("RANK", "0") != "0":  # torchrun: only rank 0 reports
        return 0
    epoch = f" (epoch {result.best_epoch})" if result.best_epoch else ""
    print(
        f"\nValidation top-1 {result.top1:.4f}, top-5 {result.top5:.4f}, loss {result.val_loss:.4f} "
        f"of the best model{epoch}; {result.steps} steps in {result.seconds:.0f} s "
        f"({result.precision}, strategy {result.strategy})."
    )
    run_dir = os.path.abspath(result.run_dir)
    print(f"Saved the best model to {os.path.abspath(result.best_path)} (last epoch: {os.path.abspath(result.final_path)}).")
    print(f"Logs: {run_dir}/log.csv, TensorBoard: {run_dir}/tensorboard")
    return 0


def _pretrain(args):
    config = _config_from_args(args)
    from keras_vit.training import TrainingDiverged
    from keras_vit.training.pretrain import pretrain

    try:
        result = pretrain(config, resume=not args.fresh)
    except TrainingDiverged as error:
        print(f"keras-vit pretrain: {error}", file=sys.stderr)
        return 3
    if os.environ.get("RANK", "0") != "0":
        return 0
    print(
        f"\nMasked patch prediction: validation loss {result.val_loss:.4f}, accuracy on corrupted "
        f"patches {result.val_accuracy:.4f}; {result.steps} steps in {result.seconds:.0f} s."
    )
    print(f"Saved the encoder to {os.path.abspath(result.encoder_path)}: fine-tune it with "
          f"keras-vit train --weights {os.path.abspath(result.encoder_path)} (same architecture).")
    return 0


def _evaluate(args):
    if args.fewshot:
        from keras_vit.training.fewshot import command

        return command(args)
    from keras_vit.training.inference import evaluate

    options = {"data_dir": args.data_dir} if args.data_dir else {}
    results = evaluate(args.model, args.data, split=args.split, batch_size=args.batch_size, **options)
    print(f"{args.model} on {results['examples']} {args.split} examples: top-1 {results['top1']:.4f}, "
          f"top-5 {results['top5']:.4f}, loss {results['loss']:.4f}")


def _predict(args):
    from keras_vit.training.inference import check_top, load_model, predict

    check_top(args.top)
    missing = [path for path in args.images if not os.path.isfile(path)]
    if missing:
        raise FileNotFoundError(f"No image file {', '.join(missing)}.")
    model, names, crop = load_model(args.model, args.weights)
    for path, best in zip(args.images, predict(model, args.images, class_names=names, top=args.top, crop_fraction=crop)):
        print(path)
        for rank, (index, name, prob) in enumerate(best, 1):
            print(f"  {rank}. {name:<30} {prob:.4f}  (class {index})")


def _export(args):
    from keras_vit.training.export import check_output, check_requirements, export

    formats = ("saved_model", "onnx") if args.format == "all" else (args.format,)
    suffixes = {"saved_model": ".savedmodel", "onnx": ".onnx"}
    outputs = {fmt: args.output + (suffixes[fmt] if len(formats) > 1 else "") for fmt in formats}
    for fmt, output in outputs.items():  # refuse before writing any
        check_requirements(fmt, not args.no_verify)
        check_output(fmt, output, args.model, args.overwrite)
    for fmt, output in outputs.items():
        error = export(args.model, fmt, output, verify_outputs=not args.no_verify, atol=args.atol,
                       overwrite=args.overwrite, quantize=args.quantize)
        checked = "" if error is None else f"; outputs match the {args.quantize or 'Keras'} model within {error:.2e}"
        print(f"Exported {args.model}{f' quantized to {args.quantize}' if args.quantize else ''} as {fmt} to {output}{checked}.")


def _field_parser(name):
    """argparse `type=` for option `name`: its value parsed as the recipe field's type."""

    def parse(text):
        try:
            return parse_value(name, text)
        except ValueError as error:
            raise argparse.ArgumentTypeError(str(error)) from None

    return parse


def _metavar(field):
    if field.name in METAVARS:
        return METAVARS[field.name]
    names = {bool: "true|false", int: "INT", float: "FLOAT", str: "TEXT", type(None): "none"}
    return "|".join(names[kind] for kind in typing.get_args(field.type) or (field.type,))


def _add_field_flags(parser):
    group = parser.add_argument_group("training options (each overrides the recipe)")
    for field in dataclasses.fields(TrainConfig):
        if field.name == "recipe":
            continue
        choices = CHOICES.get(field.name)
        group.add_argument(
            "--" + field.name.replace("_", "-"), dest=field.name, default=argparse.SUPPRESS,
            type=_field_parser(field.name), choices=choices, metavar=None if choices else _metavar(field),
            help=FIELD_HELP[field.name],
        )


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
    train.add_argument("--fresh", action="store_true", help="ignore an existing checkpoint in the run directory")
    _add_field_flags(train)
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
    pretrain.add_argument("--fresh", action="store_true", help="ignore an existing checkpoint in the run directory")
    _add_field_flags(pretrain)
    pretrain.set_defaults(func=_pretrain)

    evaluate = subparsers.add_parser("evaluate", help="top-1 / top-5 of a trained model on a data set")
    evaluate.add_argument("model", metavar="MODEL.keras", help="a .keras model (e.g. runs/digits/best.keras)")
    evaluate.add_argument("--data", metavar="NAME|DIR|FILE", help="data set (default: the one recorded with the run)")
    evaluate.add_argument("--data-dir", metavar="DIR", help="tensorflow-datasets data_dir")
    evaluate.add_argument("--split", default="validation", choices=("validation", "train"))
    evaluate.add_argument("--batch-size", type=int, default=128, metavar="INT")
    evaluate.add_argument("--fewshot", metavar="1,5,10,25", help="instead: few-shot linear accuracy of the frozen "
                          "representation (paper 4.1) with these training images per class, on the validation split")
    evaluate.add_argument("--seeds", type=int, default=3, metavar="INT", help="--fewshot: draws of the shots (default 3)")
    evaluate.add_argument("--layer", type=int, metavar="INT", help="--fewshot: the tokens after this encoder block "
                          "(pooled) instead of the pre-logits")
    evaluate.set_defaults(func=_evaluate)

    predict = subparsers.add_parser("predict", help="top-5 classes of image files")
    predict.add_argument("images", nargs="+", metavar="IMAGE")
    predict.add_argument(
        "--model", default="ViTB16", metavar="VARIANT|MODEL.keras", help="a .keras model or a variant name (default ViTB16)"
    )
    predict.add_argument("--weights", default="imagenet", metavar="NAME|PATH", help="weights of a variant (default imagenet)")
    predict.add_argument("--top", type=int, default=5, metavar="INT", help="classes shown per image (default 5)")
    predict.set_defaults(func=_predict)

    export = subparsers.add_parser("export", help="export a .keras model to a TF SavedModel and/or ONNX")
    export.add_argument("model", metavar="MODEL.keras", help="a .keras model")
    export.add_argument("--format", default="all", choices=("saved_model", "onnx", "all"))
    export.add_argument("--output", required=True, metavar="PATH", help="output path (with --format all: PATH.savedmodel and PATH.onnx)")
    export.add_argument("--atol", type=float, default=1e-4, metavar="FLOAT", help="largest accepted output difference")
    export.add_argument("--no-verify", action="store_true", help="skip loading the export and comparing outputs")
    export.add_argument("--quantize", choices=("int8", "float8", "int4"),
                        help="export the model with its dense layers quantized (Keras' model.quantize)")
    export.add_argument("--overwrite", action="store_true", help="replace what is at the output path (same kind only)")
    export.set_defaults(func=_export)
