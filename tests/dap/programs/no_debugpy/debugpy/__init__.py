"""A debugpy that cannot be imported: on PYTHONPATH, it makes a session without debugpy."""

raise ImportError("debugpy is hidden for this test")
