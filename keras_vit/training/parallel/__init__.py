"""Training on several devices and hosts: the distribution plan of each backend
(`distribution`), the PyTorch and TensorFlow multi-process pieces (`torch_ddp`,
`tf_multi_worker`, `keras_20585`), one resumed state for every process (`run_agreement`) and
the watch that ends every process when one host is lost (`hosts`)."""
