"""What the harness keeps on disk: the content-addressed checkpoint store (:mod:`.checkpoint`),
the effect log a checkpoint waits on (:mod:`.effects`) and the checksummed audit log
(:mod:`.audit`)."""
