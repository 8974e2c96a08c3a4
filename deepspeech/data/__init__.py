"""Data: manifests, audio loading, vocabulary, datasets, samplers and corpus preparers."""
