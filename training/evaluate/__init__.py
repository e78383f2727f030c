"""The one evaluation harness: tests, benchmarks, the trainer's validation and the README's table.

Modules (imported directly, so that `import ssi.products` stays light):

- `tasks`      typed `RetrievalTask`; `doc_doc_task`, `keyword_task`, `beir_task` (filtered setting)
- `scorer`     the `Scorer` protocol: score(query_texts) -> [n_queries, n_docs]
- `form_scorer` `FormScorer`: a bundle's form ranked by its reference score (ssi.forms)
- `baselines`  tf-idf, BM25, LSI, α·LSI + (1−α)·tf-idf, Rocchio query expansion (a registry)
- `metrics`    MAP, P@10, NDCG@10 (ranx) and rank loss per query; `quick_map` in numpy
- `harness`    `evaluate(task, scorers)` -> `EvalTable`; `score_task` for one scorer
- `tuning`     baseline knobs chosen on the split given
- `report`     rich / JSON / markdown tables
- `rank`       top-k and TREC run files
- `cli`        `ssi eval`, `ssi rank`
"""
