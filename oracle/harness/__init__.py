"""The paired-recovery harness: one nominal run and one branch (:mod:`.branch`), frozen and
hashed study plans (:mod:`.plan`), the resumable study runner (:mod:`.study`) and the executors
that run branches inline, in processes or on Dask (:mod:`.executors`)."""
