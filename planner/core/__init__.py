"""The planning problem and what every planner shares (see README.md here)."""
