"""`keras-vit evaluate`: a trained model's accuracy on a data set, or its few-shot linear
accuracy (`--fewshot`). Light: what a command needs is imported when it runs."""


def _evaluate(args):
    """`keras-vit evaluate MODEL [--fewshot 1,5,10,25]`: prints the accuracy (per shot count)."""
    if args.fewshot:
        return _fewshot(args)
    from keras_vit.evaluation.classification import evaluate

    options = {"data_dir": args.data_dir} if args.data_dir else {}
    results = evaluate(args.model, args.data, split=args.split, batch_size=args.batch_size, **options)
    skipped = f" ({results['skipped']} skipped: files the decoder could not read)" if results["skipped"] else ""
    print(f"{args.model} on {results['examples']} {args.split} examples{skipped}: top-1 {results['top1']:.4f}, "
          f"top-5 {results['top5']:.4f}, loss {results['loss']:.4f} (plain cross-entropy: a run's val_loss includes "
          "its label smoothing)")
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
