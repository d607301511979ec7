"""Training: offline pretraining, online finetuning as a population, evaluation.

Pretraining: one step (`pretrain_step`) and the run around it (`pretrain`); the SGI loss
composition both stages share (`sgi_loss`). Finetuning: the population's state (`population`),
its tensors along the agent axis (`stacking`), how it acts (`acting`), its update (`update`), the
update's steps on its state (`population_steps`: draws, clipping, Adam, the targets' EMA) and
the precision it runs in (`precision`), pretrained weights into a finetuning model (`transfer`),
the agents built or resumed (`finetune_agents`), how many fit (`capacity`), the runs
(`finetune`) and their environment loop (`finetune_loop`); evaluation (`evaluate`), and a trained
agent acting as a collector's policy (`agent_policy`, ``sgi-lab collect agent``). The IDF
curiosity agent that collects the Exploratory data lives in `sgi_lab.exploratory`, the replay
buffers in `sgi_lab.data`.
"""
