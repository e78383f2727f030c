"""The interleaving test's operating characteristic, simulated: how often and after how many decided impressions
`ssi.interleaving.SequentialTest` promotes a candidate of a given win rate (the figures of its docstring).

    python -m benchmarks.interleave_sprt
"""

from __future__ import annotations

import random
from typing import Annotated

import typer

from ssi.interleaving import SequentialTest


def simulate(test: SequentialTest, win_rate: float, runs: int, rng: random.Random) -> tuple[float, float, int]:
    """(share promoted, mean decided impressions, their 90th percentile) over `runs` comparisons."""
    lengths, promoted = [], 0
    for _ in range(runs):
        wins = losses = 0
        while (decision := test.decide(wins, losses, 0)) == "running":
            if rng.random() < win_rate:
                wins += 1
            else:
                losses += 1
        lengths.append(wins + losses)
        promoted += decision == "promote"
    lengths.sort()
    return promoted / runs, sum(lengths) / runs, lengths[int(0.9 * runs)]


def main(
    runs: Annotated[int, typer.Option(help="Simulated comparisons per win rate.")] = 4000,
    seed: Annotated[int, typer.Option()] = 0,
    mode: Annotated[str, typer.Option(help="The test's mode: guard or better (ssi.interleaving).")] = "guard",
) -> None:
    """Print, per win rate, the share promoted and the decided impressions it took (no budget)."""
    test = SequentialTest(budget=10**9, mode=mode)  # type: ignore[arg-type]
    rng = random.Random(seed)
    typer.echo(f"SPRT {mode}: delta {test.delta}, alpha {test.alpha}, beta {test.beta}; {runs} runs per win rate")
    for win_rate in (0.6, 0.55, 0.52, 0.5, 0.48, 0.45, 0.4):
        share, mean, p90 = simulate(test, win_rate, runs, rng)
        typer.echo(f"win rate {win_rate:.2f}: promoted {share:.3f}, decided impressions mean {mean:.0f}, p90 {p90}")


if __name__ == "__main__":
    typer.run(main)
