//! Grafana Pyroscope: one `PushRequest` per window, one series per service
//! (`__name__=process_cpu`, `service_name`, the configured labels) holding
//! that service's gzipped pprof CPU profile — sample types `samples/count`
//! and `cpu/nanoseconds`, period 1e9 / frequency, as Go's runtime writes
//! them, so that Pyroscope files it as
//! `process_cpu:cpu:nanoseconds:cpu:nanoseconds` — POSTed to
//! `push.v1.PusherService/Push` over the connect protocol.
//!
//! Owns the Pyroscope encoding and its sender; it must not cut windows.

use std::{future::Future, pin::Pin};

use prost::Message as _;

use super::{
    ServiceProfile,
    connection::Connection,
    delivery::{SendError, Sender},
};
use crate::proto::pyroscope::{
    push::v1::{PushRequest, RawProfileSeries, RawSample},
    types::v1::LabelPair,
};

/// The connect protocol's path of the push method.
pub const PUSH_PATH: &str = "/push.v1.PusherService/Push";

/// The request for a window's profiles, one series each.
pub fn encode(profiles: &[ServiceProfile], labels: &[(String, String)]) -> Vec<u8> {
    let series = profiles
        .iter()
        .map(|profile| {
            let mut pairs = vec![
                LabelPair {
                    name: "__name__".into(),
                    value: "process_cpu".into(),
                },
                LabelPair {
                    name: "service_name".into(),
                    value: profile.service.clone(),
                },
            ];
            pairs.extend(labels.iter().map(|(name, value)| LabelPair {
                name: name.clone(),
                value: value.clone(),
            }));
            RawProfileSeries {
                labels: pairs,
                samples: vec![RawSample {
                    raw_profile: profile.pprof.clone(),
                    id: String::new(),
                }],
            }
        })
        .collect();
    PushRequest { series }.encode_to_vec()
}

/// Sends push requests to a Pyroscope server.
pub struct PyroscopeSender {
    pub connection: Connection,
}

impl Sender for PyroscopeSender {
    fn send(&self, body: Vec<u8>) -> Pin<Box<dyn Future<Output = Result<(), SendError>> + Send>> {
        let connection = self.connection.clone();
        Box::pin(async move {
            connection
                .post(
                    PUSH_PATH,
                    "application/proto",
                    &[("connect-protocol-version", "1")],
                    body,
                )
                .await
        })
    }
}
