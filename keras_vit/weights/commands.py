"""`keras-vit list-weights [MODEL]` and `keras-vit convert SRC DST`."""

from keras_vit.weights.formats import export_names, output_rules  # the registry of formats imports no Keras


def _list(args):
    from keras_vit.weights.registry import weights_table

    print(weights_table(args.model))


def _convert(args):
    from keras_vit.weights.export import convert_checkpoint

    convert_checkpoint(args.src, args.dst, format=args.format, num_heads=args.num_heads, overwrite=args.overwrite,
                       force_download=args.redownload, include_top=args.include_top == "true")
    print(f"wrote {args.dst}")


def register(subparsers):
    parser = subparsers.add_parser("list-weights", help="list the named pretrained checkpoints")
    parser.add_argument("model", nargs="?", metavar="MODEL", help="a model such as ViTB16 (default: all)")
    parser.set_defaults(func=_list)

    parser = subparsers.add_parser(
        "convert",
        help=f"convert a checkpoint between formats ({', '.join(export_names())})",
    )
    parser.add_argument("src", metavar="SRC", help="checkpoint file or folder, or a named checkpoint such as ViTB16/imagenet")
    parser.add_argument(
        "dst", metavar="DST", help=f"output file or folder; its name picks the format unless --format is given ({output_rules()})"
    )
    parser.add_argument("--format", choices=export_names(), help="output format (default: from DST's name)")
    parser.add_argument(
        "--num-heads", type=int, metavar="INT",
        help="attention heads, for sources that do not record them (timm, .weights.h5, weights without config.json)",
    )
    parser.add_argument(
        "--redownload", action="store_true", help="download a named SRC again (e.g. one refused as changed)"
    )
    parser.add_argument("--include-top", choices=("true", "false"), default="true",
                        help="false: write the encoder without the classification head (default true)")
    parser.add_argument("--overwrite", action="store_true", help="replace what is at DST (same kind only)")
    parser.set_defaults(func=_convert)
