"""Replicated shards: every shard kept on several nodes' own disks, primary–backup with terms and sequence numbers
(docs/operate/replication.md): `shard_map` (the coordinator's record), `replica` (one copy: its writes, its
catch-up), `coordinator` (failure detection, promotion, recovery), `copy` (a whole copy sent to a joining replica)."""
