"""Who pays: owners and budgets, the shared ledger, and cost reports."""
