"""A debugpy of another version than msvm's mixed mode is written against (on PYTHONPATH in a test)."""

__version__ = "1.9.0"
