"""How networks run, never what they compute: device, precision, CPU settings, CUDA graphs."""
