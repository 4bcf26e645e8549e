"""Slurm and Kubernetes: snapshots from the scheduler, plans applied to it (see README.md here)."""
