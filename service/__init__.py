"""The online half: serve collections from a verified bundle, a cached FAISS index and an exact rerank.

Never imports `training` or PyTorch.
"""
