"""Online confirmation of a candidate bundle: team-draft interleaving of it with the served one (ssi.interleaving).

`record` holds a running comparison's settings (a file every worker reads), `challenger` the candidate's state
beside the served one, `comparisons` what the routes ask: which comparison runs, and how it stands.
"""
