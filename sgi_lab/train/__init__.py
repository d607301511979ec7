"""Training: offline pretraining, online finetuning as a population, evaluation, exploration.

Pretraining: one step (`pretrain_step`) and the run around it (`pretrain`); the SGI loss
composition both stages share (`sgi_loss`). Finetuning: the population's state (`population`),
its tensors along the agent axis (`stacking`), how it acts (`acting`), its update (`update`) and
the precision it runs in (`precision`), pretrained weights into a finetuning model (`transfer`),
the agents built or resumed (`finetune_agents`), how many fit (`capacity`), the runs
(`finetune`) and their environment loop (`finetune_loop`); evaluation (`evaluate`); the
training run of the IDF curiosity agent (`sgi_lab.exploratory`) that collects the Exploratory
data (`explore`). The replay buffers live in `sgi_lab.data`.
"""
