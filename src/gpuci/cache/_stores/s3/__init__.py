"""The S3 store: one bounded client for every operation, whatever the credentials."""
