"""``python -m pipelines.demo`` / ``spark-submit pipelines/demo/__main__.py``: run the demo."""

import sys
from pathlib import Path

if __package__ in (None, ""):
    # Launched as a file (spark-submit): make the repository root importable.
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from pipelines.demo.runner import main

if __name__ == "__main__":
    sys.exit(main())
