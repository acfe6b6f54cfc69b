"""Where Spark runs and what it is given: the one session factory (:mod:`.session`), the
jars and catalog settings every session carries (:mod:`.jars`, :mod:`.catalog`), cdclake's
code for executors (:mod:`.shipping`), and how a task's error comes back (:mod:`.tasks`).
Decode, snapshot, merge, maintenance and ``cdclake sql`` all start here."""
