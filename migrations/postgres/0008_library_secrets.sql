-- The secrets a library keeps, by name. `content_hash`: the key of the content hashes by which an
-- upload is matched to an entry it duplicates (`server/src/library/secret.rs`): made by the
-- first server to open the library, read by every server after it.
CREATE TABLE library_secrets (
    name TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
-- Hashes taken before, under XXH3's published secret, can never equal a keyed one: cleared, so
-- that the column holds keyed hashes only (an entry of before is still found by its SHA-256).
UPDATE snapshots SET content_hash = NULL;
