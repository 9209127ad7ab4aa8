"""`python -m llm_decode` (from benchmarks/) runs the benchmark as `python benchmarks/llm_decode.py`
does."""

import sys

from .cli import main

sys.exit(main())
