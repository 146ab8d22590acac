"""python -m msvm == the msvm command."""

import sys

from .cli import main

sys.exit(main())
