//! With the `host-kernels` feature only (tests, benches, `clippy --all-targets`:
//! the self dev-dependency in Cargo.toml turns it on): compiles the CUDA kernels
//! (`kernels/mel.cu`, `kernels/frames.cu`) for the host through the emulation
//! header (`kernels/host_launch.cpp` includes `kernels/shim/host_cuda.h`, then
//! `mel.cu`; `kernels/host_launch_frames.cpp` the same with `frames.cu`)
//! into a static library linked into the crate, so tests run the real kernel
//! source on the CPU (`src/compute/cuda/testing/host.rs`). NVRTC compiles the same
//! `mel.cu` for the device at run time; nothing here needs a CUDA toolkit.
//!
//! Without the feature (`cargo build`, `cargo run`, `cargo install`) this does
//! nothing: users building the daemon need no C++ compiler.
//!
//! `-ffp-contract=off`: the kernels round like the Rust code, which never fuses
//! `a·b + c`; the host build must not fuse either.
//!
//! With the feature it needs a C++17 compiler (`c++`/`g++`; on Debian
//! `apt-get install g++`).

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    if std::env::var_os("CARGO_FEATURE_HOST_KERNELS").is_none() {
        return;
    }
    println!("cargo:rerun-if-changed=kernels");
    cc::Build::new()
        .cpp(true)
        .file("kernels/host_launch.cpp")
        .file("kernels/host_launch_frames.cpp")
        .include("kernels")
        .std("c++17")
        .opt_level(2)
        .flag("-x")
        .flag("c++")
        .flag_if_supported("-ffp-contract=off")
        .flag_if_supported("-fno-fast-math")
        // The kernels use no C++ runtime (no exceptions, RTTI, allocation or
        // dynamic initialisation), so the binary gains no libstdc++ dependency.
        .flag("-fno-exceptions")
        .flag("-fno-rtti")
        .cpp_link_stdlib(None)
        .warnings(true)
        .extra_warnings(true)
        .compile("melforge_host_kernels");
}
