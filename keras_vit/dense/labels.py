"""The label value of pixels without a class (`IGNORE`), shared by the data, the losses and the
scores without importing TensorFlow with the losses."""

IGNORE = 255  # the mask value of pixels without a label: no loss, not scored
