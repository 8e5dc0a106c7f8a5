"""CoDA: co-evolving data engine and action policy."""
__version__ = "0.1.0"
