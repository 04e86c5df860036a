"""Performance scripts; each prints its figures as JSON (ratios measured side by side in one run)."""
