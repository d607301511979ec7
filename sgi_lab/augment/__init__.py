"""Augmentation, one home: the image operations, the random draws, the training path."""
