//! The library's content secret: the key of the hashes by which an upload is matched to an entry
//! that holds the same snapshot compressed another way (`rows::find_by_content`).
//!
//! The engine hashes a snapshot's decoded bytes with XXH3-128, which is fast and not
//! collision-resistant under its published secret: someone who could guess another user's
//! snapshot could make a different file with the same hash and upload it first, and that user's
//! upload would then open the other file. Keyed with random bytes that only the library holds,
//! the hash cannot be aimed. The secret is made once, by the first server to open the library
//! (others sharing a PostgreSQL database find it there), and never leaves the database.

use anyhow::Context;
use snapshot::{CONTENT_SECRET_BYTES, ContentSecret};

use crate::db::Db;
use crate::hex;
use crate::with_db;

/// The secret's name in `library_secrets`.
const NAME: &str = "content_hash";

/// The library's content secret, made and stored first if it has none.
pub(super) async fn content_secret(db: &Db) -> anyhow::Result<ContentSecret> {
    let mut fresh = [0u8; CONTENT_SECRET_BYTES];
    getrandom::fill(&mut fresh)
        .map_err(|e| anyhow::anyhow!("cannot get random bytes from the system: {e}"))?;
    let fresh = hex(&fresh);
    // Whichever server inserts first wins; the others read its secret.
    with_db!(db, |p| sqlx::query(
        "INSERT INTO library_secrets (name, value) VALUES ($1, $2) ON CONFLICT (name) DO NOTHING"
    )
    .bind(NAME)
    .bind(&fresh)
    .execute(p)
    .await
    .map(|_| ()))
    .context("cannot store the library's content secret")?;
    let stored: String = with_db!(db, |p| sqlx::query_scalar(
        "SELECT value FROM library_secrets WHERE name = $1"
    )
    .bind(NAME)
    .fetch_one(p)
    .await)
    .context("cannot read the library's content secret")?;
    parse(&stored).map(ContentSecret::new).with_context(|| {
        format!(
            "the library's content secret is damaged (library_secrets, name {NAME:?}): delete \
             that row and restart; uploads made before then are still found by their SHA-256"
        )
    })
}

/// The secret's bytes from their hex, if that is what the text is.
fn parse(text: &str) -> Option<[u8; CONTENT_SECRET_BYTES]> {
    if text.len() != 2 * CONTENT_SECRET_BYTES || !text.is_ascii() {
        return None;
    }
    let mut out = [0u8; CONTENT_SECRET_BYTES];
    for (i, b) in out.iter_mut().enumerate() {
        *b = u8::from_str_radix(&text[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_secret_reads_back_from_its_hex() {
        let bytes: [u8; CONTENT_SECRET_BYTES] = std::array::from_fn(|i| (i * 37 + 5) as u8);
        assert_eq!(parse(&hex(&bytes)), Some(bytes));
        assert_eq!(parse(&hex(&bytes[1..])), None);
        assert_eq!(parse(&"zz".repeat(CONTENT_SECRET_BYTES)), None);
    }
}
