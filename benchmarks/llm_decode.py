"""The LLM decode benchmark's command: `python benchmarks/llm_decode.py --help`.

The benchmark is the package `benchmarks/llm_decode/` (its docstring describes it); this file
keeps the command line, and code that loads this file as a module gets the package's names.
`import llm_decode` with benchmarks/ on sys.path imports the package (a package comes before a
module of the same name in one folder).
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from llm_decode import *  # noqa: E402,F403  (the package's names, as the single file had them)
from llm_decode.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
