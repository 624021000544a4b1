"""The label-set contract between the harness that produces label sets and the policies that
consume them: the paper's definitions (:mod:`.definitions`: advantage, charged checkpoint cost,
the one price of a placement, strata, the sign-unstable rule, pilot cells, seeds, branch order)
and the schema-checked, hash-verified tables (:mod:`.tables`: ``LabelSet``, ``RecoveryTable``)."""
