-- PyTorch's peaks in the library (issue 33): `peak_bytes` is the highest allocated (block) bytes
-- of any device, as `torch.cuda.max_memory_allocated()` counts them, and this column the highest
-- reserved bytes (`max_memory_reserved()`); `reserved_bytes` stays what the snapshot holds at
-- its end. 0 in rows written before: filled in when their report is computed again.
ALTER TABLE snapshots ADD COLUMN peak_reserved_bytes BIGINT NOT NULL DEFAULT 0;
