"""A decision made into the contract's plan, explained and verified (see README.md here)."""
