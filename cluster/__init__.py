"""The cluster layer: the same index, search and write API over document shards on a Ray cluster.

Optional (`pip install -e .[cluster]`): nothing in `ssi/` or `service/` imports this package, and only
the modules that talk to Ray (`cluster.ray_index`, `cluster.deploy`, `cluster.local`) import it, inside
the `ssi index --ray` and `ssi cluster` commands. A shard is an ordinary service collection (its own
document store, snapshot and exact search, service.collection), so a shard scores with exactly the
single node's form code (ssi.forms) and exact rerank (service.rerank).
"""
