"""The click recipe: how a model is trained from a click log, as the simulated loop measured it.

One place for the numbers, read by `ssi train --clicks` (training.run.resolve_recipe fills in the model's and
the budget where not given), by `ssi learn` (training.feedback.round.train_command passes the rest to every
`ssi train` of a round) and by the loop that measured them (benchmarks.click_loop). The figures are in
docs/results/learning-loop.md ("The loop, simulated" and "The click recipe").
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ClickRecipe:
    """Trainer settings of a click log on the BM25 base, each with why.

    - init_scale 0.01: U's random start ten times smaller; a click log's few thousand query words leave more of
      it untrained (+0.007 and +0.012 NDCG@10 on average on SciFact's validation claims, two logs × three
      seeds, benchmarks.click_debias).
    - ensemble 3: three seeds folded into one rank-N model (training.ensemble): one seed's model still moved by
      up to 0.02 (0.7908-0.8127 on one log); the fold landed near its members' mean, above it on four logs
      (+0.002 to +0.011) and below on one (-0.004).
    - epochs 12: a bounded budget. The loop's rounds trained 12 epochs from scratch: 10 s for three members on a
      10,000-session SciFact log (2 cores, the `ssi train` process's start included), where `ssi train`'s
      10-minute default would spend half an hour on three members, for no measured gain (24 epochs: 0.7902
      against 0.7897 on a 30,000-session log).
    - lr 0.03: the labelled SciFact recipe's rate, from scratch (0.06: 0.7665 against 0.7865 on one log).
    - hard_fraction 0: uniform negatives (0.25: 0.7842 against 0.7897).
    - valid_share 0: no early stopping on clicks. Validation on clicks favours the ranker that logged them
      (its clicked documents are its own top ones): with it the loop's trainer kept its start every round, so
      the last step is kept and `ssi learn`'s held-out estimate alone decides.
    """

    init_scale: float = 0.01
    ensemble: int = 3
    epochs: float = 12.0
    lr: float = 0.03
    hard_fraction: float = 0.0
    valid_share: float = 0.0

    def model_defaults(self, search_clicks_alone: bool = True) -> dict[str, float | int]:
        """What `ssi train --clicks` fills in on the BM25 base where not given (TrainSettings field names); the
        budget (`epochs`) only where no --epochs and no --max-minutes were given (training.run.resolve_recipe).
        `search_clicks_alone`: a search log with nothing else to validate on (no --queries, --valid-clicks or
        --pages): the loop's training too, without which `ssi train --clicks` at its defaults kept its start
        (validation on clicks: its best step was step 0 for all three members on a 10,000-session log)."""
        found: dict[str, float | int] = {"init_scale": self.init_scale, "ensemble": self.ensemble}
        if search_clicks_alone:
            found |= {"lr": self.lr, "hard_fraction": self.hard_fraction, "valid_share": self.valid_share}
        return found


CLICK_RECIPE = ClickRecipe()
