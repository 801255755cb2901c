"""`keras-vit predict | export`: using a trained model."""

import os
import sys


def _predict(args):
    from keras_vit.data.imagenet import check_top
    from keras_vit.inference.predict import load_model, predict

    check_top(args.top)
    from keras_vit.utils.files import regular_file

    missing = [path for path in args.images if not os.path.lexists(path)]
    if missing:
        raise FileNotFoundError(f"No image file {', '.join(missing)}.")
    for path in args.images:
        regular_file(path, "as an image")  # a FIFO would block
    model, names, crop = load_model(args.model, args.weights)
    for path, best in zip(args.images, predict(model, args.images, class_names=names, top=args.top, crop_fraction=crop,
                                              model_path=args.model)):
        print(path)
        for rank, (index, name, prob) in enumerate(best, 1):
            print(f"  {rank}. {name:<30} {prob:.4f}  (class {index})")


# The layouts a LoRA adapter is written in (`keras_vit.lora.adapter.LAYOUTS`), as the output says them.
ADAPTER_LAYOUTS = {"peft": "a PEFT adapter", "kerashub": "a KerasHub LoRA file", "npz": "a keras_vit LoRA file"}


def _peft_base_warning(adapter):
    """Why transformers has no model for the base of the run that wrote `adapter` (its `config.json`
    beside it), or None: PEFT applies an adapter to transformers' `ViTForImageClassification`, whose
    head reads the class token."""
    from keras_vit.run_folder import metadata

    config = metadata(adapter).get("config", {})
    pooling, class_token = config.get("pooling", "token"), config.get("class_token", True)
    if pooling == "token" and class_token is not False:
        return None
    return (f"warning: the run's base model pools by {pooling!r}{'' if class_token is not False else ' without a class token'}; "
            "transformers' ViTForImageClassification reads the class token, so PEFT on it gives other logits than "
            "this run (keras-vit convert refuses the base for that reason; --include-top false writes its encoder).")


def _export(args):
    if args.format in ADAPTER_LAYOUTS:
        from keras_vit.lora.adapter import convert

        warning = _peft_base_warning(args.model) if args.format == "peft" else None
        loading = convert(args.model, args.output, args.format, overwrite=args.overwrite)
        if warning:
            print(warning, file=sys.stderr)
        print(f"Wrote the LoRA adapter {args.model} as {ADAPTER_LAYOUTS[args.format]} to {args.output}"
              + (f"; KerasHub loads it with {loading}" if loading else "") + ".")
        return
    from keras_vit.inference.serving import (FORMATS, check_output, check_quantize, check_requirements, export,
                                             output_path)
    from keras_vit.inference.serving_card import card_path

    formats = FORMATS if args.format == "all" else tuple(dict.fromkeys(args.format.split(",")))
    unknown = [fmt for fmt in formats if fmt not in FORMATS]
    if unknown:
        raise ValueError(f"--format {args.format}: unknown {', '.join(unknown)}; expected a comma-separated list "
                         f"of {', '.join(FORMATS)}, or all.")
    outputs = {fmt: output_path(fmt, args.output, several=len(formats) > 1) for fmt in formats}
    for fmt, output in outputs.items():  # refuse before writing any
        check_requirements(fmt, not args.no_verify)
        check_quantize(fmt, args.quantize)
        check_output(fmt, output, args.model, args.overwrite)
    for fmt, output in outputs.items():
        print(f"Exporting as {fmt} to {output} (written, then run in its runtime and compared)...", flush=True)
        error = export(args.model, fmt, output, verify_outputs=not args.no_verify, atol=args.atol,
                       overwrite=args.overwrite, quantize=args.quantize)
        checked = "" if error is None else f"; outputs match the {args.quantize or 'Keras'} model within {error:.2e}"
        print(f"Exported {args.model}{f' quantized to {args.quantize}' if args.quantize else ''} as {fmt} to {output}{checked}; "
              f"how to call it: {card_path(output)}.")


def register(subparsers):
    predict = subparsers.add_parser("predict", help="top-5 classes of image files")
    predict.add_argument("images", nargs="+", metavar="IMAGE")
    predict.add_argument(
        "--model", default="ViTB16", metavar="VARIANT|MODEL.keras", help="a .keras model or a variant name (default ViTB16)"
    )
    predict.add_argument("--weights", default="imagenet", metavar="NAME|PATH", help="weights of a variant (default imagenet)")
    predict.add_argument("--top", type=int, default=5, metavar="INT", help="classes shown per image (default 5)")
    predict.set_defaults(func=_predict)

    export = subparsers.add_parser("export", help="export a .keras model for serving (SavedModel, ONNX, LiteRT, "
                                   "OpenVINO, PyTorch program), or a LoRA adapter for PEFT or KerasHub")
    export.add_argument("model", metavar="MODEL.keras|ADAPTER", help="a .keras model; or a LoRA adapter (a run's "
                        "lora.npz, a PEFT adapter folder, a KerasHub .lora.h5) with --format peft, kerashub or npz")
    export.add_argument("--format", default="saved_model,onnx", metavar="FORMATS",
                        help="comma-separated, among saved_model, onnx, litert, openvino, torch; or all "
                        "(default saved_model,onnx); for an adapter one of peft, kerashub, npz")
    export.add_argument("--output", required=True, metavar="PATH", help="output path (with several formats: PATH.savedmodel, "
                        "PATH.onnx, PATH.tflite, PATH.openvino, PATH.pt2)")
    export.add_argument("--atol", type=float, default=1e-4, metavar="FLOAT", help="largest accepted output difference")
    export.add_argument("--no-verify", action="store_true", help="skip loading the export and comparing outputs")
    export.add_argument("--quantize", choices=("int8", "float8", "int4"),
                        help="export the model with its dense layers quantized (Keras' model.quantize); a "
                        "format that does not take the mode is refused before anything is written")
    export.add_argument("--overwrite", action="store_true", help="replace what is at the output path (same kind only)")
    export.set_defaults(func=_export)
