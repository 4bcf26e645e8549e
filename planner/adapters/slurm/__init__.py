"""Slurm adapter: snapshot from ``squeue``/``sinfo``/``scontrol`` JSON, apply a plan
with ``scancel``/``scontrol``, and a tick loop. See ``docs/slurm.md``.

Modules: ``parse`` (JSON -> contract snapshot dict, pure), ``apply`` (plan ->
commands), ``run`` (reading Slurm, the tick loop), ``config``, ``state``,
``hostlist``, ``commands`` (the ``slurm`` CLI subcommand).
"""
