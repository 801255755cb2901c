"""Key-mapping rules between a checkpoint layout and the canonical (original npz) layout.

A `Rule` ties a group of canonical keys to a group of keys of another layout, with a lazy
conversion each way. Key templates may hold `{i}`, the index of a transformer block. `convert`
applies a rule table to a dict of `LazyArray`s in either direction and reports every missing
or unexpected key by name.
"""

import dataclasses
import re

from keras_vit.weights.lazy import concat


@dataclasses.dataclass(frozen=True)
class Rule:
    """`ours`: canonical key templates; `theirs`: the other layout's; `to_ours(arrays, heads)`
    and `to_theirs(arrays, heads)` map lists of `LazyArray`s; `optional` groups (a head) may
    be absent as a whole."""

    ours: tuple
    theirs: tuple
    to_ours: object = None
    to_theirs: object = None
    optional: bool = False


def same(arrays, heads):
    return list(arrays)


def conv_to_ours(arrays, heads):
    """PyTorch conv `(out, in, kh, kw)` -> HWIO."""
    return [arrays[0].transpose(2, 3, 1, 0)]


def conv_to_theirs(arrays, heads):
    return [arrays[0].transpose(3, 2, 0, 1)]


def heads_of(array, heads, what):
    if heads is None or array.shape[0] % heads:
        raise ValueError(f"{array.source}: cannot split width {array.shape[0]} of {what} into {heads} heads.")
    return heads


def linear_to_heads(arrays, heads):
    """PyTorch q/k/v weights `(D, D)` -> `(D, heads, D // heads)`."""
    return [a.transpose(1, 0).reshape(a.shape[1], heads_of(a, heads, "attention"), -1) for a in arrays]


def heads_to_linear(arrays, heads):
    return [a.reshape(a.shape[0], -1).transpose(1, 0) for a in arrays]


def bias_to_heads(arrays, heads):
    return [a.reshape(heads_of(a, heads, "attention"), -1) for a in arrays]


def heads_to_bias(arrays, heads):
    return [a.reshape(-1) for a in arrays]


def out_to_heads(arrays, heads):
    """PyTorch attention output weight `(D, D)` -> `(heads, D // heads, D)`."""
    a = arrays[0]
    return [a.transpose(1, 0).reshape(heads_of(a, heads, "attention"), -1, a.shape[0])]


def heads_to_out(arrays, heads):
    a = arrays[0]
    return [a.reshape(-1, a.shape[-1]).transpose(1, 0)]


def split_rows(arrays, heads, parts=3):
    """One fused `(3 D, ...)` array -> three `(D, ...)` arrays."""
    a = arrays[0]
    if a.shape[0] % parts:
        raise ValueError(f"{a.source}: fused q/k/v of shape {a.shape} does not split in {parts}.")
    n = a.shape[0] // parts
    return [a.rows(j * n, (j + 1) * n) for j in range(parts)]


def join_rows(arrays, heads):
    return [concat(arrays, axis=0)]


def _pattern(template):
    return re.compile(r"(\d+)".join(re.escape(p) for p in template.split("{i}")) + r"\Z")


def block_count(keys, templates):
    """1 + the largest block index found in `keys` for the `{i}` templates (0 if none)."""
    patterns = [_pattern(t) for t in templates if "{i}" in t]
    found = [int(m.group(1)) for k in keys for p in patterns for m in [p.match(k)] if m]
    return max(found) + 1 if found else 0


def _describe(keys, limit=6):
    keys = sorted(keys)
    shown = ", ".join(repr(k) for k in keys[:limit])
    return shown + (f" and {len(keys) - limit} more" if len(keys) > limit else "")


def convert(tensors, rules, *, to_canonical, heads=None, keymaps=(), what="checkpoint"):
    """Maps `tensors` through `rules` (to the canonical layout or from it). `keymaps` are
    functions `key -> (new_key, transform or None) | None` tried on keys no rule takes (the
    hook for hybrid stems). Raises ValueError naming missing and unexpected keys."""
    src = (lambda r: r.theirs) if to_canonical else (lambda r: r.ours)
    dst = (lambda r: r.ours) if to_canonical else (lambda r: r.theirs)
    depth = block_count(tensors, [t for r in rules for t in src(r)])
    out, used, missing = {}, set(), []
    for rule in rules:
        per_block = any("{i}" in t for t in src(rule))
        for i in range(depth) if per_block else [None]:
            keys = [t.format(i=i) for t in src(rule)]
            present = [k in tensors for k in keys]
            if not all(present):
                if not (rule.optional and not any(present)):
                    missing += [k for k, p in zip(keys, present) if not p]
                continue
            fn = (rule.to_ours if to_canonical else rule.to_theirs) or same
            values = fn([tensors[k] for k in keys], heads)
            out.update(zip([t.format(i=i) for t in dst(rule)], values))
            used.update(keys)
    unexpected = []
    for key in tensors.keys() - used:
        mapped = next((m for m in (f(key) for f in keymaps) if m is not None), None)
        if mapped is None:
            unexpected.append(key)
            continue
        new_key, transform = mapped
        out[new_key] = transform(tensors[key]) if transform else tensors[key]
    if depth == 0:
        missing.insert(0, "(no transformer blocks found)")
    if missing or unexpected:
        parts = []
        if missing:
            parts.append(f"missing keys: {_describe(missing)}")
        if unexpected:
            parts.append(f"keys keras_vit cannot map: {_describe(unexpected)}")
        raise ValueError(f"{what}: " + "; ".join(parts) + ".")
    return out
