"""Evaluating a model, for the `evaluate` command and during training: few-shot linear
accuracy (`fewshot`, paper 4.1), top-1 / top-5 on a data set (`classification`). The training
callback that runs the few-shot evaluator is `keras_vit.training.fewshot_callback`.
"""
