"""The one evaluation harness: tests, benchmarks, the trainer's validation and the README's table.

Modules (imported directly, so that `import training.evaluate.products` stays light):

- `tasks`      typed `RetrievalTask`; `doc_doc_task`, `keyword_task`, `beir_task` (filtered setting)
- `splits`     `split_by_query`: the validation queries carved out of BEIR train qrels
- `scorer`     the `Scorer` protocol: score(query_texts) -> [n_queries, n_docs]
- `ssi_scorer` `SSIScorer`: f(q, d) = (Uq)·(Vd) + Σ wᵢ qᵢ dᵢ from arrays or a bundle
- `baselines`  tf-idf, BM25, LSI, α·LSI + (1−α)·tf-idf, Rocchio query expansion (a registry)
- `metrics`    MAP, P@10, NDCG@10 (ranx) and rank loss per query; `quick_map` in numpy
- `harness`    `evaluate(task, scorers)` -> `EvalTable`; `score_task` for one scorer
- `tuning`     baseline knobs chosen on the split given
- `report`     rich / JSON / markdown tables
- `rank`       top-k and TREC run files
- `cli`        `ssi eval`, `ssi rank`
"""
