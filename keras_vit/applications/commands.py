"""`keras-vit list-models`."""

from keras_vit.families import FAMILIES, HYBRIDS, VARIANTS, family_of


def list_models(args):
    print(f"{'model':<20} {'family':<9} {'patch':>5} {'width':>6} {'depth':>6} {'heads':>6} {'mlp':>6} {'input':>5}")
    for name, arch in {**VARIANTS, **FAMILIES}.items():
        print(
            f"{name:<20} {family_of(name).__name__.rsplit('.', 1)[-1]:<9} {arch['patch_size']:>5} "
            f"{arch['hidden_dim']:>6} {arch['depth']:>6} {arch['num_heads']:>6} {arch['mlp_dim']:>6} "
            f"{arch.get('input_size', 224):>5}"
        )
    print(f"hybrids (ResNet stem + ViT-B/16 encoder): {', '.join(HYBRIDS)}")


def register(subparsers):
    parser = subparsers.add_parser("list-models", help="list the named models (the builders) of every family")
    parser.set_defaults(func=list_models)
