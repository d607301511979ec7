"""The finetuning bar's agent-steps/s: the bar's own recent rate, never a logged row's stale one."""

from __future__ import annotations

from types import SimpleNamespace

from sgi_lab.train.finetune_loop import _Progress


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_postfix_shows_the_recent_rate_not_a_logged_rows(capsys):
    agents = [SimpleNamespace(game="minatar/breakout")] * 3
    progress = _Progress(agents, steps=100, step=0, progress=True)
    clock = Clock()
    progress.bar._time = clock  # tqdm reads its clock through this attribute
    progress.bar.start_t = progress.bar.last_print_t = clock.now
    for _ in range(40):  # 2 steps a second; the rows carry the acting-only rate of 85
        clock.now += 0.5
        progress.show([{"charts/sps": 85.0, "episode/return": 4.0}])
    assert progress.postfix["agent-steps/s"] == "6.0"  # 2 steps/s x 3 agents
    assert progress.postfix["return"] == "4"
    progress.close()


def test_a_disabled_bar_shows_returns_only():
    progress = _Progress([SimpleNamespace(game="g")], steps=10, step=0, progress=False)
    progress.show([{"charts/sps": 85.0, "episode/return": 2.0}])
    assert progress.postfix == {"return": "2"}
