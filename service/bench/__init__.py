"""`ssi bench`: latency and throughput over HTTP, index build time and memory, recall of approximate
indexes, all read against an in-process BM25 (bm25s) over the same corpus measured in the same run.

Not a test: machines are shared and noisy, so figures are printed next to the baseline's and as
ratios to it, with corpus size, N, D and thread counts, and written as JSON.
"""
