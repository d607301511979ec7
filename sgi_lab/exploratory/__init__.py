"""The Exploratory data (SGI-E): the IDF curiosity agent of Burda et al. 2018 that collects it.

The agent's networks (`networks`: actor-critic, inverse-dynamics features and the forward model
whose error is the intrinsic reward), PPO's pieces (`ppo`: GAE and the clipped objective), the
agent's state and its PPO update (`idf_agent`), the collection, a training run that writes
every transition into a store (`collector`), and the episode writer it writes through
(`episodes`). Its command, ``sgi-lab collect exploratory``, is `sgi_lab.launch.collect_exploratory`.
"""
