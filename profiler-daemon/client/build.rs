//! Generates the API's message types and its client (no server) from the
//! .proto files the daemon serves (`../proto`), with protox: no protoc
//! binary is needed.

use anyhow::{Context as _, Result};

fn main() -> Result<()> {
    let protos = [
        "../proto/profilerd/v1/profilerd.proto",
        "../proto/perftools/profile.proto",
    ];
    for proto in protos {
        println!("cargo:rerun-if-changed={proto}");
    }
    let descriptors =
        protox::compile(protos, ["../proto"]).context("compiling the .proto files")?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(false)
        // For scripts: `profilerctl status --json` prints the reply as is.
        .type_attribute(".profilerd.v1", "#[derive(serde::Serialize)]")
        .compile_fds(descriptors)
        .context("generating Rust code from the .proto files")?;
    Ok(())
}
