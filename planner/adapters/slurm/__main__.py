"""``python -m planner.adapters.slurm snapshot|apply|run ...`` (the same as
``preempt-planner slurm``)."""

import sys

from planner.commands.slurm import main

sys.exit(main())
