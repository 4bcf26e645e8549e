"""``python -m planner.adapters.slurm snapshot|apply|run ...`` (same as ``preempt-planner slurm``)."""

import sys

from planner.commands.slurm import main

sys.exit(main())
