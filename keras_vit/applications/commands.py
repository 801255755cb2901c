"""`keras-vit list-models`."""

from keras_vit.family_variants import FAMILIES
from keras_vit.variants import HYBRIDS, VARIANTS


def list_models(args):
    print(f"{'model':<14} {'patch':>5} {'width':>6} {'depth':>6} {'heads':>6} {'mlp':>6}")
    for name, arch in {**VARIANTS, **FAMILIES}.items():
        print(
            f"{name:<14} {arch['patch_size']:>5} {arch['hidden_dim']:>6} {arch['depth']:>6} "
            f"{arch['num_heads']:>6} {arch['mlp_dim']:>6}"
        )
    print(f"hybrids (ResNet stem + ViT-B/16 encoder): {', '.join(HYBRIDS)}")


def register(subparsers):
    parser = subparsers.add_parser("list-models", help="list the model variants")
    parser.set_defaults(func=list_models)
