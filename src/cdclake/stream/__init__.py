"""The stream's state kept in the store, beside the WAL and the change batches: where the next
batch starts and what it inherits (:mod:`.progress`). The decode on Spark writes it; the
snapshot, the pipeline's steps and ``cdclake status`` read it."""
