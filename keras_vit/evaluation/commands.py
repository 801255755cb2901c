"""`keras-vit evaluate`: a trained model's accuracy on a data set, or its few-shot linear
accuracy (`--fewshot`). Light: what a command needs is imported when it runs."""

import argparse


def _evaluate(args):
    """`keras-vit evaluate MODEL [--fewshot 1,5,10,25]`: prints the accuracy (per shot count)."""
    if args.zero_shot:
        return _zero_shot(args)
    if args.fewshot:
        return _fewshot(args)
    if args.template is not None:
        raise ValueError("--template is for --zero-shot only.")
    from keras_vit.evaluation.dense import dense_task, evaluate_dense, report

    task, model = dense_task(args.model)
    dense = {"sliding_window": args.sliding_window, "window": args.window, "stride": args.stride,
             "depth_scale": args.depth_scale}
    if task is not None:  # segmentation / depth: scored at each image's own size
        results = evaluate_dense(args.model, args.data, split=args.split, batch_size=args.batch_size, model=model,
                                 data_dir=args.data_dir, **dense)
        print("\n".join(report(args.model, results, args.data)))
        return 0
    given = [f"--{name.replace('_', '-')}" for name, value in dense.items() if value is not None]
    if given:
        raise ValueError(f"{', '.join(given)}: for a segmentation or depth model; {args.model} is a classifier.")
    from keras_vit.evaluation.classification import evaluate

    options = {"data_dir": args.data_dir} if args.data_dir else {}
    results = evaluate(args.model, args.data, split=args.split, batch_size=args.batch_size, **options)
    skipped = f" ({results['skipped']} skipped: files the decoder could not read)" if results["skipped"] else ""
    print(f"{args.model} on {results['examples']} {args.split} examples{skipped}: top-1 {results['top1']:.4f}, "
          f"top-5 {results['top5']:.4f}, loss {results['loss']:.4f} (plain cross-entropy: a run's val_loss includes "
          "its label smoothing)")
    return 0


def _zero_shot(args):
    import os

    if args.fewshot:
        raise ValueError("--zero-shot and --fewshot: choose one.")
    if not args.data or not os.path.isdir(args.data):
        raise ValueError(f"--zero-shot needs --data DIR, an image folder DIR/CLASS/IMAGE whose class names are the "
                         f"labels (got {args.data!r}).")
    if not os.path.isdir(args.model):
        raise FileNotFoundError(f"{args.model}: no such folder (a transformers CLIPModel, SiglipModel or Siglip2Model "
                                "folder, or one ImageTextModel.save wrote).")
    from keras_vit.text.tokenizers import check_labels

    if args.template is not None:
        check_labels(["label"], args.template)
    from keras_vit.evaluation.zero_shot import evaluate_zero_shot
    from keras_vit.text.image_text import ImageTextModel

    results = evaluate_zero_shot(ImageTextModel.from_checkpoint(args.model), args.data, template=args.template,
                                 batch_size=args.batch_size)
    print(f"{args.model} zero-shot on {results['examples']} images of {results['classes']} classes in {args.data}: "
          f"top-1 {results['top1']:.4f}, top-5 {results['top5']:.4f}")
    return 0


def _fewshot(args):
    import numpy as np

    from keras_vit.evaluation.fewshot import L2, evaluate as fewshot_evaluate, image_size_of, parse_shots
    from keras_vit.evaluation.classification import recorded_source
    from keras_vit.run_folder import load_model, metadata

    shots = parse_shots(args.fewshot)
    if args.seeds < 1:
        raise ValueError(f"--seeds {args.seeds} must be >= 1.")
    model, _, crop = load_model(args.model)
    options = {"data_dir": args.data_dir} if args.data_dir else {}
    source = recorded_source(args.model, args.data, **options)
    size = metadata(args.model).get("classes", {}).get("image_size")
    results = fewshot_evaluate(model, source, shots=shots, seeds=args.seeds, layer=args.layer,
                               image_size=image_size_of(model, size), batch_size=args.batch_size, crop_fraction=crop,
                               per_seed=True)
    where = "pre-logits" if args.layer is None else f"block {args.layer}"
    print(f"{args.model}: few-shot linear accuracy ({where}, l2 {L2:g}) on {source.validation_size} validation "
          f"examples of {source.name}, mean ± std over {args.seeds} seed(s):")
    for k, accuracies in results.items():
        print(f"  {k:>3}-shot  {np.mean(accuracies):.4f} ± {np.std(accuracies):.4f}")
    return 0


def register(subparsers):
    evaluate = subparsers.add_parser("evaluate", help="top-1 / top-5 of a trained model on a data set (a segmentation "
                                     "model: mIoU, per-class IoU, pixel accuracy; depth: AbsRel, RMSE, delta1)")
    evaluate.add_argument("model", metavar="MODEL.keras", help="a .keras model (e.g. runs/digits/best.keras); with "
                          "--zero-shot an image-text model folder (CLIPModel, SiglipModel, Siglip2Model)")
    evaluate.add_argument("--data", metavar="NAME|DIR|FILE", help="data set (default: the one recorded with the run)")
    evaluate.add_argument("--data-dir", metavar="DIR", help="tensorflow-datasets data_dir")
    evaluate.add_argument("--split", default="validation", choices=("validation", "train"))
    evaluate.add_argument("--batch-size", type=int, default=128, metavar="INT")
    evaluate.add_argument("--sliding-window", action=argparse.BooleanOptionalAction, help="segmentation / depth: "
                          "windows of the model's size over each image, its short side resized to the window, outputs "
                          "averaged where they overlap (default: as the run's eval_window says, else whole images)")
    evaluate.add_argument("--window", type=int, metavar="N", help="--sliding-window: the window (default: the "
                          "model's input size; needed for a model of any size)")
    evaluate.add_argument("--stride", type=int, metavar="M", help="--sliding-window: pixels between windows (default: "
                          "the run's eval_stride, else 2/3 of the window)")
    evaluate.add_argument("--depth-scale", type=float, metavar="S", help="depth: a 16-bit depth PNG holds depth x S "
                          "(default: the run's depth_scale, else the values as they are)")
    evaluate.add_argument("--fewshot", metavar="1,5,10,25", help="instead: few-shot linear accuracy of the frozen "
                          "representation (paper 4.1) with these training images per class, on the validation split")
    evaluate.add_argument("--seeds", type=int, default=3, metavar="INT", help="--fewshot: draws of the shots (default 3)")
    evaluate.add_argument("--layer", type=int, metavar="INT", help="--fewshot: the tokens after this encoder block "
                          "(pooled) instead of the pre-logits")
    evaluate.add_argument("--zero-shot", action="store_true", help="instead: the zero-shot top-1 / top-5 of an "
                          "image-text model on --data DIR, an image folder whose class folder names are the labels")
    evaluate.add_argument("--template", metavar="T", help="--zero-shot: each class name put in place of {} in T, "
                          "e.g. 'a photo of a {}.'")
    evaluate.set_defaults(func=_evaluate)
