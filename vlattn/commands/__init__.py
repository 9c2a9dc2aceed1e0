"""Sub-commands of ``vlattn`` that drive a task (the top-level app, :mod:`vlattn.cli`, mounts them)."""
