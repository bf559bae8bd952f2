//! Rebuilds when migrations are added (`sqlx::migrate!` embeds them but does not notice new files).
fn main() {
    println!("cargo:rerun-if-changed=../migrations");
}
