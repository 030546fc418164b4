"""Inside a job: ``oomdoctor run -- COMMAND`` and ``oomdoctor.watch()``.

* ``command`` — the ``run`` command: retries and the report it writes;
* ``process`` — starting the job in its own process group, signals, exit status;
* ``pump``    — passing the job's output through while keeping what a diagnosis needs;
* ``capture`` — the bounded capture of those lines;
* ``cgroup``  — what only the wrapper can see: the memory cgroup, the kernel's kill lines;
* ``watch``   — the in-process door (a context manager and an excepthook).
"""
