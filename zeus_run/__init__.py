"""zeus-run: run recurring training jobs with the Zeus energy optimizer.

The package root stays light (no numpy, no YAML) because training scripts
import `zeus_run.train` from it.
"""

__version__ = "0.1.0"
