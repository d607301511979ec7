"""A dataset card (``README.md``) for a store exported as a Minari dataset: how the data was
made (the source, a selection of an agent's replay, the agent and its learning curve), what it
holds (steps, episodes, returns, observations, env protocol, sticky actions), how to load it,
and the licence of the game code that made the frames. `sgi_lab.launch.exchange` writes it
beside the dataset's ``data/`` folder, where ``minari upload`` (Hugging Face remote) sends it
with the data (docs/datasets.md says how)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from sgi_lab.base.files import atomic_write_text
from sgi_lab.base.yaml_io import front_matter
from sgi_lab.data.store import TransitionStore

__all__ = ["CARD", "dataset_card", "game_code_licence", "write_dataset_card"]

CARD = "README.md"
MINATAR_LICENCE = (
    "gpl-3.0",
    "MinAtar (Young & Tian, 2019; github.com/kenjyoung/MinAtar) is GPL-3.0: the frames are "
    "its games' states. Whoever publishes the dataset chooses its licence; the front matter "
    "proposes the game code's.",
)
ATARI_LICENCE = (
    "other",
    "The Atari 2600 games (played by the Arcade Learning Environment, ale-py, GPL-2.0) remain "
    "their copyright holders'; the frames are their screens. Whoever publishes the dataset "
    "answers for that.",
)


def game_code_licence(game: str) -> tuple[str, str]:
    """``(Hub licence id, sentence)`` of the code that made a game's frames."""
    return MINATAR_LICENCE if game.startswith("minatar/") else ATARI_LICENCE


def _how_made(params: dict[str, Any], source: str) -> list[str]:
    """Sentences saying how the data was made, from the manifest's source and params."""
    if source == "random":
        hold = params.get("hold_p")
        return [f"A uniformly random action held for Geometric({hold}) steps (the paper's Random)."]
    if source == "exploratory":
        return ["The first steps of an IDF curiosity agent (the paper's Exploratory)."]
    agent = params.get("agent", params)
    config = agent.get("config") or {}
    updates, every = config.get("updates_per_step"), config.get("update_every") or 1
    period = (
        f"{updates} update(s) every {every} steps" if every > 1 else f"{updates} update(s) a step"
    )
    run = (
        f"one agent's training run from scratch ({agent.get('run')}: Rainbow, SSL "
        f"{config.get('ssl')}, {period}, encoder {config.get('encoder')}, seed "
        f"{agent.get('seed')}, {agent.get('steps')} steps)"
    )
    if source == "replay":
        return [f"Every transition of {run}, in the order it was lived: the DQN Replay recipe."]
    if params.get("selection") == "weak":
        return [
            f"**Weak**: the first {params.get('fraction'):.4g} of {run}: {params.get('rows')} rows, "
            "the agent's early, exploratory experience (the paper's Weak takes a DQN run's "
            "first 1M of 50M steps)."
        ]
    if params.get("selection") == "mixed":
        segments = params.get("segments") or []
        return [
            f"**Mixed**: {params.get('rows')} rows drawn uniformly over the whole of {run}, in "
            f"{len(segments)} segments of {params.get('segment')} rows (seed {params.get('seed')}"
            "), kept in the run's order; each segment starts an episode (the paper's Mixed "
            "concatenates checkpoints spread evenly over a DQN run)."
        ]
    return [f"Source {source!r} (the store's manifest has its parameters)."]


def _number(value: Any) -> str:
    return f"{value:.3f}" if isinstance(value, float) else str(value)


def _agent_lines(params: dict[str, Any]) -> list[str]:
    """The making agent's evaluation and learning curve, for a replay or a selection of one."""
    agent = params.get("agent", params)
    if not isinstance(agent.get("curve"), list):
        return []
    final = agent.get("final_evaluation") or {}
    resumed = [c for c in agent.get("commits") or [] if c.get("from_step")]
    code = f"sgi-lab commit `{agent.get('commit')}`" + "".join(
        f", resumed at step {c['from_step']} on `{c['commit']}`" for c in resumed
    )
    lines = [
        "## The agent that made it",
        "",
        f"Run `{agent.get('run')}` (config SHA-256 `{agent.get('config_sha256')}`, {code}, "
        f"{agent.get('cpu')}). Final evaluation: mean return "
        f"{final.get('mean')} over {final.get('episodes')} episodes at step {final.get('step')} "
        f"({final.get('normalization')} {_number(final.get('normalized_score'))}).",
        "",
        "Learning curve (training episodes that ended in each checkpoint interval):",
        "",
        "| checkpoint step | episodes | mean return | mean length |",
        "|---:|---:|---:|---:|",
    ]
    for row in agent["curve"]:
        ret, length = row.get("mean_return"), row.get("mean_length")
        lines.append(
            f"| {row.get('step')} | {row.get('episodes')} | "
            f"{'-' if ret is None else f'{ret:.3f}'} | {'-' if length is None else f'{length:.1f}'} |"
        )
    return [*lines, ""]


def dataset_card(store: TransitionStore, dataset_id: str) -> str:
    """``README.md`` of a Minari dataset exported from ``store``: Hub front matter, how the
    data was made, what it holds, how to load it, and the game code's licence."""
    m = store.manifest
    licence, licence_text = game_code_licence(m.game)
    returns = np.add.reduceat(store.rewards.astype(np.float64), store.episode_starts)
    summary = store.summary()
    front = {
        "license": licence,
        "tags": ["reinforcement-learning", "offline-rl", "minari", "sgi-lab"]
        + (["minatar"] if m.game.startswith("minatar/") else ["atari"]),
        "pretty_name": dataset_id,
    }
    rows = [
        ("game", m.game),
        ("source", m.source),
        ("transitions", len(store)),
        ("episodes", f"{store.num_episodes} ({summary['terminals']} end in a terminal)"),
        ("episode return", f"mean {returns.mean():.3f}, min {returns.min():g}, max "
         f"{returns.max():g} (raw rewards; an episode cut by the data's end counts as far as it "
         "goes)"),
        ("observation", f"uint8 {list(store.frame_shape)} per step, channels first, raw (no JPEG)"),
        ("actions", f"Discrete({store.num_actions})"),
        ("env protocol", m.env_protocol),
        ("sticky actions", m.sticky_action_prob),
        ("store fingerprint", store.fingerprint),
    ]  # fmt: skip
    parts = [
        front_matter(front),
        "",
        f"# {dataset_id}",
        "",
        *_how_made(m.params, m.source),
        "",
        "| | |",
        "|---|---|",
        *[f"| {k} | {v} |" for k, v in rows],
        "",
        *_agent_lines(m.params),
        "## Format and loading",
        "",
        "A Minari dataset (`data/metadata.json`, `data/main_data.hdf5`) written by sgi-lab's "
        "`sgi-lab export minari`: one Minari episode per stored episode; `terminations` are "
        "the learning terminals, `truncations` mark an episode that ends without one; the last "
        "observation of each episode is a copy of the one before (the store keeps no "
        "observation after an episode's last step). The metadata's `sgi_lab_manifest` holds "
        "the whole store manifest (the making agent's config and curve included).",
        "",
        "```python",
        "import minari  # with this folder at $MINARI_DATASETS_PATH/" + dataset_id,
        f'dataset = minari.load_dataset("{dataset_id}")',
        "```",
        "",
        f"`sgi-lab import minari --src $MINARI_DATASETS_PATH/{dataset_id} --out STORE` gives "
        "back the sgi-lab store bit for bit.",
        "",
        "## Licence",
        "",
        licence_text,
        "",
    ]
    return "\n".join(parts)


def write_dataset_card(
    store: str | os.PathLike | TransitionStore, out: str | os.PathLike, dataset_id: str
) -> Path:
    """Write `dataset_card` as ``out/README.md`` (atomically); returns its path."""
    store = store if isinstance(store, TransitionStore) else TransitionStore(store)
    path = Path(out) / CARD
    atomic_write_text(path, dataset_card(store, dataset_id))
    return path
