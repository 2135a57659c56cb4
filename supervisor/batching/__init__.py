"""Many runs from one list of items: locally with bounded concurrency, or one Ray task per
run (``supervisor.batch`` is the public entry; this room holds its engine)."""
