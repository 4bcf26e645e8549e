"""``python -m planner.slurm snapshot|apply|run ...`` (same as ``preempt-planner slurm``)."""

import sys

from planner.slurm.commands import main

sys.exit(main())
