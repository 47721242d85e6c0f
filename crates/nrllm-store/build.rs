// The migrations are embedded by `sqlx::migrate!`: rebuild when one is added or changed (as
// sqlx's own `migrate build-script` advises), not only when the crate's code changes.
fn main() {
    println!("cargo:rerun-if-changed=../../migrations");
}
