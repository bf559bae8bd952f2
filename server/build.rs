//! Builds the dashboard (`frontend/`, Leptos compiled to wasm32) and embeds it: a nested cargo
//! build with its own target dir (sharing ours would deadlock on the lock), then wasm-bindgen as a
//! library to make the JS glue. The server `include_bytes!`s the results from OUT_DIR, so
//! `memscope` is one self-contained binary. See ../shared/docs/BUILD.md for why it is done so.

use std::env;
use std::path::PathBuf;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=../migrations");
    // The dashboard also compiles the `api` types and the engine (GPU sizes, frame rules, words):
    // a change there is a change of the dashboard.
    for p in [
        "../api/src",
        "../snapshot/src",
        "../frontend/src",
        "../frontend/Cargo.toml",
        "../frontend/Cargo.lock",
        "../frontend/index.html",
        "../frontend/style.css",
    ] {
        println!("cargo:rerun-if-changed={p}");
    }
    let out = PathBuf::from(env::var("OUT_DIR").expect("OUT_DIR"));
    let root = PathBuf::from(env::var("CARGO_MANIFEST_DIR").expect("manifest dir")).join("..");
    let target_dir = root.join("target").join("frontend");
    let cargo = env::var("CARGO").unwrap_or_else(|_| "cargo".into());

    let mut cmd = Command::new(cargo);
    cmd.args([
        "build",
        "--release",
        "--locked",
        "--target",
        "wasm32-unknown-unknown",
        "--manifest-path",
    ])
    .arg(root.join("frontend").join("Cargo.toml"))
    .arg("--target-dir")
    .arg(&target_dir);
    // The outer build's settings must not leak into the nested one (keep CARGO_MAKEFLAGS: jobserver).
    for (key, _) in env::vars() {
        let strip = key.starts_with("CARGO_FEATURE_")
            || key.starts_with("CARGO_CFG_")
            || [
                "CARGO_ENCODED_RUSTFLAGS",
                "RUSTFLAGS",
                "CARGO_TARGET_DIR",
                "CARGO_BUILD_TARGET",
                "RUSTC_WORKSPACE_WRAPPER",
                "RUSTC_WRAPPER",
                "CARGO_PRIMARY_PACKAGE",
                "TARGET",
                "HOST",
                "PROFILE",
                "OPT_LEVEL",
                "DEBUG",
                "OUT_DIR",
                "CARGO_MANIFEST_DIR",
                "CARGO_MANIFEST_PATH",
                "CARGO_PKG_NAME",
            ]
            .contains(&key.as_str());
        if strip {
            cmd.env_remove(&key);
        }
    }
    println!(
        "cargo:warning=building the dashboard (frontend/, wasm32); a clean build takes a few minutes"
    );
    let status = cmd.status().expect("could not run cargo for the frontend");
    if !status.success() {
        panic!(
            "building the dashboard failed. If the error says the wasm32-unknown-unknown target is missing, run \
             `rustup target add wasm32-unknown-unknown` (./scripts/test does it)."
        );
    }
    let wasm = target_dir
        .join("wasm32-unknown-unknown")
        .join("release")
        .join("frontend.wasm");
    wasm_bindgen_cli_support::Bindgen::new()
        .input_path(&wasm)
        .web(true)
        .expect("wasm-bindgen web target")
        .typescript(false)
        // The name section is half the file (1.1 of 2.2 MB): the browser does not need it, and
        // every page load fetches and parses it.
        .keep_debug(false)
        .remove_name_section(true)
        .remove_producers_section(true)
        .generate(&out)
        .expect("wasm-bindgen could not process the dashboard's wasm");
}
