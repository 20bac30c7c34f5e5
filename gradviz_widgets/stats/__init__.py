"""Gradient numbers computed on the device and read back in one host sync: exact L2 norms and
max |g| (`reduce`, batched by `norms.NormBatch`), per-tensor hook summaries (`tensor`)."""
