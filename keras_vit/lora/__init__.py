"""Low-rank adaptation (LoRA) of a ViT's encoder projections: which projections (`targets`,
plain Python), enabling, saving and loading adapters (`adapter`), and the PEFT / KerasHub
layouts they are written in (`layouts`).
"""
