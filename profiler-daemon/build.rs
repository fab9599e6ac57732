//! Builds what the daemon embeds: the eBPF object (with the nightly toolchain
//! and bpf-linker, through aya-build) and the gRPC/pprof protobuf code (with
//! protox, so no protoc binary is needed), and the web view's flame graph
//! viewer that `cargo xtask` fetched (see xtask/src/web.rs).

use anyhow::{Context as _, Result};

fn main() -> Result<()> {
    build_protos()?;
    embed_web_viewer()?;
    build_ebpf()
}

/// Set by `cargo xtask` to the directory of the viewer's files.
const WEB_VIEWER_VAR: &str = "PROFILERD_WEB_VIEWER";

/// The viewer's files the daemon serves under `/ui/`, with their types.
const WEB_VIEWER_FILES: &[(&str, &str)] = &[
    ("d3.min.js", "text/javascript; charset=utf-8"),
    ("d3-flamegraph.min.js", "text/javascript; charset=utf-8"),
    ("d3-flamegraph.css", "text/css; charset=utf-8"),
];

/// Writes `web_viewer.rs` into OUT_DIR: the viewer's files as
/// `(name, content type, bytes)`, or none when this build was not given
/// them (a plain `cargo build`; the page then says how to get them).
fn embed_web_viewer() -> Result<()> {
    println!("cargo:rerun-if-env-changed={WEB_VIEWER_VAR}");
    let dir = std::env::var_os(WEB_VIEWER_VAR).map(std::path::PathBuf::from);
    let mut entries = Vec::new();
    if let Some(dir) = dir.filter(|dir| !dir.as_os_str().is_empty()) {
        for (name, content_type) in WEB_VIEWER_FILES {
            let path = dir.join(name);
            if !path.is_file() {
                anyhow::bail!(
                    "{WEB_VIEWER_VAR} names {} but it holds no {name}; `cargo xtask build` \
                     fetches the viewer again",
                    dir.display()
                );
            }
            println!("cargo:rerun-if-changed={}", path.display());
            entries.push(format!(
                "({name:?}, {content_type:?}, include_bytes!({:?})),",
                path.display().to_string()
            ));
        }
    }
    let out_dir = std::path::PathBuf::from(std::env::var("OUT_DIR")?);
    std::fs::write(
        out_dir.join("web_viewer.rs"),
        format!(
            "/// The web view's flame graph viewer: (name, content type, bytes).\n\
             pub const VIEWER_FILES: &[(&str, &str, &[u8])] = &[{}];\n",
            entries.join("\n")
        ),
    )
    .context("writing web_viewer.rs")?;
    Ok(())
}

fn build_protos() -> Result<()> {
    let protos = [
        "proto/profilerd/v1/profilerd.proto",
        "proto/perftools/profile.proto",
        "proto/pyroscope/push/v1/push.proto",
    ];
    for proto in protos
        .iter()
        .chain(&["proto/pyroscope/types/v1/types.proto"])
    {
        println!("cargo:rerun-if-changed={proto}");
    }
    let descriptors = protox::compile(protos, ["proto", "proto/pyroscope"])
        .context("compiling the .proto files")?;
    // For gRPC server reflection.
    let out_dir = std::path::PathBuf::from(std::env::var("OUT_DIR")?);
    std::fs::write(
        out_dir.join("descriptors.bin"),
        prost::Message::encode_to_vec(&descriptors),
    )
    .context("writing the descriptor set")?;
    // The message types (and the client) are the client crate's, pprof's
    // the report crate's; only the server is generated here, on them.
    tonic_prost_build::configure()
        .build_client(false)
        .build_server(true)
        .extern_path(".profilerd.v1", "::profilerd_client::v1")
        .extern_path(".perftools.profiles", "::profilerd_report::pprof")
        // Undecodable requests are INVALID_ARGUMENT, not INTERNAL.
        .codec_path("crate::proto::codec::ApiCodec")
        .compile_fds(descriptors)
        .context("generating Rust code from the .proto files")?;
    Ok(())
}

/// Names the installed toolchain that is the pinned nightly (see
/// `EBPF_NIGHTLY` in xtask/src/bootstrap.rs); set by every `cargo xtask`
/// command. Without it, rustup's `nightly` is used.
const EBPF_TOOLCHAIN_VAR: &str = "PROFILERD_EBPF_TOOLCHAIN";

/// The daemon's feature that also builds design 2's prototype, as an
/// object of its own (`unwind_tables_prototype`, beside `profiler`).
const PROTOTYPE_FEATURE_VAR: &str = "CARGO_FEATURE_UNWIND_TABLES_PROTOTYPE";

fn build_ebpf() -> Result<()> {
    let prototype = std::env::var_os(PROTOTYPE_FEATURE_VAR).is_some();
    let ebpf = aya_build::Package {
        name: "profiler-ebpf",
        root_dir: "../profiler-ebpf",
        features: if prototype {
            &["unwind-tables-prototype"]
        } else {
            &[]
        },
        ..Default::default()
    };
    println!("cargo:rerun-if-env-changed={EBPF_TOOLCHAIN_VAR}");
    let chosen = std::env::var(EBPF_TOOLCHAIN_VAR).ok();
    let toolchain = match chosen.as_deref() {
        Some(name) if !name.is_empty() => aya_build::Toolchain::Custom(name),
        _ => aya_build::Toolchain::Nightly,
    };
    aya_build::build_ebpf([ebpf], toolchain).context(
        "building the eBPF programs failed; they need the pinned nightly toolchain with \
         rust-src and a bpf-linker built against its LLVM: `cargo xtask build` installs both",
    )
}
