"""A short real generation: the request, the engines (local transformers, a live server) and incremental stop matching."""
