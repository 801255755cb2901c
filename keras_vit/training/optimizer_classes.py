"""The Keras optimizer class of each `optimizer=` name (the base of its layer-decay and EMA classes)."""

import keras

CLASSES = {"sgd": keras.optimizers.SGD, "adam": keras.optimizers.Adam, "adamw": keras.optimizers.AdamW,
           "muon": keras.optimizers.Muon, "lamb": keras.optimizers.Lamb, "lion": keras.optimizers.Lion,
           "adafactor": keras.optimizers.Adafactor}
# `beta_2` when none is given: the optimizer's own (Lion's, in its paper and in Keras: 0.99).
OWN_BETA_2 = {"adam": 0.999, "adamw": 0.999, "muon": 0.999, "lamb": 0.999, "lion": 0.99}
# Muon splits its variables between two updates of its own: no per-variable learning rates.
WITHOUT_LAYER_DECAY = ("muon",)
