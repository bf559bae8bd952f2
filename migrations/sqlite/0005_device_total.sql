-- A snapshot's device total memory and where it came from (issue 11): the OOM verdicts need it to
-- tell memory held outside PyTorch from PyTorch's own exhaustion, and a snapshot does not record it.
ALTER TABLE snapshots ADD COLUMN device_total_bytes INTEGER;   -- NULL: unknown
ALTER TABLE snapshots ADD COLUMN device_total_source TEXT;     -- upload | collector | set
ALTER TABLE snapshots ADD COLUMN device_total_detail TEXT;     -- "NVIDIA H200 on gpu-7", for people
