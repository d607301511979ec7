"""Training loops: offline pretraining, online finetuning, evaluation, and the replay buffer."""
