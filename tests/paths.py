"""Where things are, for the tests (importable because tests/conftest.py puts tests/ on sys.path)."""

import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLES = os.path.join(ROOT, "examples")
