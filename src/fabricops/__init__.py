"""fabricops: inventory in, validated GPU training fabric out."""

__version__ = "0.1.0"
