//! Generates the pprof profile messages (`perftools.profiles`) from the
//! .proto file the daemon ships (`../proto`), with protox: no protoc
//! binary is needed. Messages only: no gRPC code.

use anyhow::{Context as _, Result};

fn main() -> Result<()> {
    let proto = "../proto/perftools/profile.proto";
    println!("cargo:rerun-if-changed={proto}");
    let descriptors = protox::compile([proto], ["../proto"]).context("compiling profile.proto")?;
    prost_build::Config::new()
        .compile_fds(descriptors)
        .context("generating Rust code from profile.proto")?;
    Ok(())
}
