"""Bronze: landing files ingested exactly once into Delta, with a quarantine and a ledger."""
