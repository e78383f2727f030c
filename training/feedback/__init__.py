"""Learning from the service's own traffic: split its event log by time, train a candidate, promote it safely.

`promote` estimates counterfactually, on held-out recent impressions, whether a candidate bundle ranks the
clicked documents at least as well as the served one (Joachims, Swaminathan & Schnabel 2017); `round` is one
`ssi learn` round (split, train, estimate, reload); `start` writes a bundle that ranks exactly as its BM25 base,
for a service that has no trained model yet.
"""
