"""Augmentation, one home: the image operations, the random draws, the training path.

- `ops`: SPR/DrQ's random shift (replicate pad, then a random crop back to size) and intensity
  jitter, batched, with or without a time axis (`augment`);
- `draws`: every random number of a population's step from one uniform draw per agent, at a
  `Layout` fixed by the config alone;
- `frames`: the one augmentation path of training: pretraining draws from its generator
  (`draw_augmentation`), finetuning takes each agent's draw, then `augmented_frames`.
"""
