// Scotch (Debian libscotch-dev 7.0.3) is the reference mapper behind `--algorithm scotch`.
// scotcherr reports Scotch's errors on stderr and returns instead of exiting.
fn main() {
    println!("cargo:rustc-link-lib=scotch");
    println!("cargo:rustc-link-lib=scotcherr");
    println!("cargo:rerun-if-changed=build.rs");
}
