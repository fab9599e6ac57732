//! OpenTelemetry profiles (experimental: the signal is still alpha, its
//! package `v1development`): one `ExportProfilesServiceRequest` per window
//! with one resource per process (`process.pid`,
//! `process.executable.name` and `.path`, `container.id`, `service.name`,
//! `host.name`), its CPU samples as one `cpu/nanoseconds` profile, the
//! threads' names and ids as sample attributes, and one shared dictionary
//! whose every table starts with the empty entry the specification asks
//! for; sent to `ProfilesService/Export` over gRPC with the maintained
//! `opentelemetry-proto` types.
//!
//! Owns the OTLP encoding and its sender; it must not cut windows.

use std::{collections::BTreeMap, future::Future, pin::Pin, time::Duration};

use anyhow::{Context as _, Result};
use opentelemetry_proto::tonic::{
    collector::profiles::v1development::{
        ExportProfilesServiceRequest, profiles_service_client::ProfilesServiceClient,
    },
    common::v1::{AnyValue, InstrumentationScope, KeyValue, any_value::Value},
    profiles::v1development::{
        Function, KeyValueAndUnit, Line, Link, Location, Mapping, Profile as OtlpProfile,
        ProfilesDictionary, ResourceProfiles, Sample, ScopeProfiles, Stack, ValueType,
    },
    resource::v1::Resource,
};
use prost::Message as _;
use rustc_hash::FxHashMap;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Identity};

use super::{
    delivery::{SendError, Sender},
    naming,
    settings::{PushSettings, PushTarget},
};
use crate::profile::{Profile, unix_nanos};

/// The request for a window: every process's samples (the idle tasks,
/// pid 0, are left out).
pub fn encode(
    profile: &Profile,
    settings: &PushSettings,
    host: &str,
    pods: super::naming::PodLookup<'_>,
) -> Vec<u8> {
    let mut dictionary = Dictionary::new();
    let mut by_process: BTreeMap<u32, Vec<Sample>> = BTreeMap::new();
    let mut first_thread: BTreeMap<u32, usize> = BTreeMap::new();
    for sample in &profile.samples {
        let thread = &profile.threads[sample.thread as usize];
        if thread.pid == 0 {
            continue;
        }
        first_thread
            .entry(thread.pid)
            .or_insert(sample.thread as usize);
        let stack = dictionary.stack(profile, sample.stack);
        let attributes = vec![
            dictionary.attribute(
                "thread.name",
                Value::StringValue(thread.thread_name.to_string()),
            ),
            dictionary.attribute("thread.id", Value::IntValue(i64::from(thread.tid))),
        ];
        by_process.entry(thread.pid).or_default().push(Sample {
            stack_index: stack,
            attribute_indices: attributes,
            link_index: 0,
            values: vec![i64::try_from(sample.weight).unwrap_or(i64::MAX)],
            timestamps_unix_nano: Vec::new(),
        });
    }
    // OTLP's times are unsigned: a start before the epoch is the epoch.
    let start = u64::try_from(unix_nanos(profile.start)).unwrap_or(0);
    let duration = profile
        .end
        .duration_since(profile.start)
        .unwrap_or_default()
        .as_nanos() as u64;
    let sample_type = ValueType {
        type_strindex: dictionary.string("cpu"),
        unit_strindex: dictionary.string("nanoseconds"),
    };
    let resource_profiles = by_process
        .into_iter()
        .map(|(pid, samples)| {
            let thread = &profile.threads[first_thread[&pid]];
            let mut attributes = vec![
                key_value("process.pid", Value::IntValue(i64::from(pid))),
                key_value(
                    "process.executable.name",
                    Value::StringValue(thread.process_name.to_string()),
                ),
                key_value(
                    "service.name",
                    Value::StringValue(naming::service_name(
                        &settings.service_name_sources,
                        &settings.service_name_default,
                        &thread.cgroup,
                        &thread.process_name,
                        pods,
                    )),
                ),
                key_value("host.name", Value::StringValue(host.to_owned())),
            ];
            // The process's executable, while it runs (readable as root).
            if let Ok(path) = std::fs::read_link(format!("/proc/{pid}/exe")) {
                attributes.push(key_value(
                    "process.executable.path",
                    Value::StringValue(path.display().to_string()),
                ));
            }
            if let Some(id) = naming::container_id(&thread.cgroup) {
                attributes.push(key_value("container.id", Value::StringValue(id.to_owned())));
            }
            attributes.extend(
                settings
                    .labels
                    .iter()
                    .map(|(name, value)| key_value(name, Value::StringValue(value.clone()))),
            );
            ResourceProfiles {
                resource: Some(Resource {
                    attributes,
                    ..Resource::default()
                }),
                scope_profiles: vec![ScopeProfiles {
                    scope: Some(InstrumentationScope {
                        name: "profilerd".to_owned(),
                        version: env!("CARGO_PKG_VERSION").to_owned(),
                        ..InstrumentationScope::default()
                    }),
                    profiles: vec![OtlpProfile {
                        sample_type: Some(sample_type),
                        samples,
                        time_unix_nano: start,
                        duration_nano: duration,
                        period_type: Some(sample_type),
                        period: i64::try_from(profile.period_ns).unwrap_or(i64::MAX),
                        ..OtlpProfile::default()
                    }],
                    schema_url: String::new(),
                }],
                schema_url: String::new(),
            }
        })
        .collect();
    ExportProfilesServiceRequest {
        resource_profiles,
        dictionary: Some(dictionary.finish()),
    }
    .encode_to_vec()
}

fn key_value(key: &str, value: Value) -> KeyValue {
    KeyValue {
        key: key.to_owned(),
        value: Some(AnyValue { value: Some(value) }),
        ..KeyValue::default()
    }
}

/// The shared tables, each entry once, entry 0 the empty value.
struct Dictionary {
    tables: ProfilesDictionary,
    strings: FxHashMap<String, i32>,
    mappings: FxHashMap<String, i32>,
    functions: FxHashMap<(i32, i32), i32>,
    /// By the profile's location index.
    locations: FxHashMap<u32, i32>,
    /// By the profile's stack index.
    stacks: FxHashMap<u32, i32>,
    attributes: FxHashMap<(i32, String), i32>,
}

impl Dictionary {
    fn new() -> Self {
        let tables = ProfilesDictionary {
            mapping_table: vec![Mapping::default()],
            location_table: vec![Location::default()],
            function_table: vec![Function::default()],
            link_table: vec![Link::default()],
            string_table: vec![String::new()],
            attribute_table: vec![KeyValueAndUnit::default()],
            stack_table: vec![Stack::default()],
        };
        let mut strings = FxHashMap::default();
        strings.insert(String::new(), 0);
        Self {
            tables,
            strings,
            mappings: FxHashMap::default(),
            functions: FxHashMap::default(),
            locations: FxHashMap::default(),
            stacks: FxHashMap::default(),
            attributes: FxHashMap::default(),
        }
    }

    fn string(&mut self, text: &str) -> i32 {
        if let Some(&index) = self.strings.get(text) {
            return index;
        }
        let index = self.tables.string_table.len() as i32;
        self.tables.string_table.push(text.to_owned());
        self.strings.insert(text.to_owned(), index);
        index
    }

    fn attribute(&mut self, key: &str, value: Value) -> i32 {
        let key_index = self.string(key);
        let text = match &value {
            Value::StringValue(text) => format!("s{text}"),
            Value::IntValue(number) => format!("i{number}"),
            other => format!("{other:?}"),
        };
        if let Some(&index) = self.attributes.get(&(key_index, text.clone())) {
            return index;
        }
        let index = self.tables.attribute_table.len() as i32;
        self.tables.attribute_table.push(KeyValueAndUnit {
            key_strindex: key_index,
            value: Some(AnyValue { value: Some(value) }),
            unit_strindex: 0,
        });
        self.attributes.insert((key_index, text), index);
        index
    }

    fn mapping(&mut self, module: &str) -> i32 {
        if let Some(&index) = self.mappings.get(module) {
            return index;
        }
        let filename = self.string(module);
        let index = self.tables.mapping_table.len() as i32;
        self.tables.mapping_table.push(Mapping {
            filename_strindex: filename,
            ..Mapping::default()
        });
        self.mappings.insert(module.to_owned(), index);
        index
    }

    fn function(&mut self, name: &str, file: Option<&str>) -> i32 {
        let name = self.string(name);
        let file = file.map_or(0, |file| self.string(file));
        if let Some(&index) = self.functions.get(&(name, file)) {
            return index;
        }
        let index = self.tables.function_table.len() as i32;
        self.tables.function_table.push(Function {
            name_strindex: name,
            system_name_strindex: name,
            filename_strindex: file,
            start_line: 0,
        });
        self.functions.insert((name, file), index);
        index
    }

    fn location(&mut self, profile: &Profile, location: u32) -> i32 {
        if let Some(&index) = self.locations.get(&location) {
            return index;
        }
        let source = &profile.locations[location as usize];
        let mapping = self.mapping(&source.module);
        // Innermost first: the last line is the caller the others were
        // inlined into.
        let lines = source
            .frames
            .iter()
            .rev()
            .map(|frame| Line {
                function_index: self.function(&frame.function, frame.file.as_deref()),
                line: i64::from(frame.line),
                column: 0,
            })
            .collect();
        let index = self.tables.location_table.len() as i32;
        self.tables.location_table.push(Location {
            mapping_index: mapping,
            address: source.address,
            lines,
            attribute_indices: Vec::new(),
        });
        self.locations.insert(location, index);
        index
    }

    /// A stack, leaf first as OTLP has it (the profile's are root first).
    fn stack(&mut self, profile: &Profile, stack: u32) -> i32 {
        if let Some(&index) = self.stacks.get(&stack) {
            return index;
        }
        let locations: Vec<u32> = profile.stacks.get(stack).unwrap_or_default().to_vec();
        let location_indices = locations
            .iter()
            .rev()
            .map(|&location| self.location(profile, location))
            .collect();
        let index = self.tables.stack_table.len() as i32;
        self.tables.stack_table.push(Stack { location_indices });
        self.stacks.insert(stack, index);
        index
    }

    fn finish(self) -> ProfilesDictionary {
        self.tables
    }
}

/// Sends export requests to a collector over gRPC.
pub struct OtlpSender {
    client: ProfilesServiceClient<Channel>,
    headers: Vec<(
        tonic::metadata::AsciiMetadataKey,
        tonic::metadata::AsciiMetadataValue,
    )>,
    timeout: Duration,
}

impl OtlpSender {
    /// A client of the target (connected when first used, so that a
    /// collector that is down does not stop the daemon).
    pub fn new(target: &PushTarget, connection: &super::connection::Connection) -> Result<Self> {
        let mut endpoint = Channel::from_shared(target.url.clone())
            .with_context(|| format!("url {:?} is not a valid address", target.url))?
            .timeout(target.timeout)
            .connect_timeout(target.timeout);
        if target.url.starts_with("https://") {
            let ca_file = target
                .ca_file
                .clone()
                .unwrap_or_else(|| super::connection::SYSTEM_CA_FILE.into());
            let ca = std::fs::read(&ca_file)
                .with_context(|| format!("cannot read ca_file {}", ca_file.display()))?;
            let mut tls = ClientTlsConfig::new().ca_certificate(Certificate::from_pem(ca));
            if let (Some(cert), Some(key)) = (&target.client_cert, &target.client_key) {
                let read = |path: &std::path::Path, key: &str| {
                    std::fs::read(path)
                        .with_context(|| format!("cannot read {key} {}", path.display()))
                };
                tls = tls.identity(Identity::from_pem(
                    read(cert, "client_cert")?,
                    read(key, "client_key")?,
                ));
            }
            endpoint = endpoint.tls_config(tls).context("cannot set up TLS")?;
        }
        let headers = connection
            .headers
            .iter()
            .map(|(name, value)| {
                Ok((
                    name.as_str()
                        .parse()
                        .context("a header name gRPC cannot send")?,
                    value
                        .to_str()
                        .ok()
                        .and_then(|value| value.parse().ok())
                        .context("a header value gRPC cannot send")?,
                ))
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Self {
            client: ProfilesServiceClient::new(endpoint.connect_lazy()),
            headers,
            timeout: target.timeout,
        })
    }
}

impl Sender for OtlpSender {
    fn send(&self, body: Vec<u8>) -> Pin<Box<dyn Future<Output = Result<(), SendError>> + Send>> {
        let mut client = self.client.clone();
        let headers = self.headers.clone();
        let timeout = self.timeout;
        Box::pin(async move {
            let message = ExportProfilesServiceRequest::decode(body.as_slice()).map_err(|err| {
                SendError::Fatal {
                    cause: "encoding".into(),
                    message: format!("a queued payload does not decode: {err}"),
                }
            })?;
            let mut request = tonic::Request::new(message);
            request.set_timeout(timeout);
            for (name, value) in headers {
                request.metadata_mut().insert(name, value);
            }
            match client.export(request).await {
                Ok(reply) => match reply.into_inner().partial_success {
                    Some(partial) if partial.rejected_profiles > 0 => Err(SendError::Fatal {
                        cause: "rejected".into(),
                        message: format!(
                            "the collector rejected {} profiles: {}",
                            partial.rejected_profiles, partial.error_message
                        ),
                    }),
                    _ => Ok(()),
                },
                Err(status) => Err(grpc_error(&status)),
            }
        })
    }
}

/// Retryable as OTLP says: unavailable, resource exhausted (with a retry
/// hint), deadline exceeded, aborted; anything else is the payload's fault.
fn grpc_error(status: &tonic::Status) -> SendError {
    use tonic::Code;
    let cause = format!("grpc_{:?}", status.code()).to_lowercase();
    let message = format!("{:?}: {}", status.code(), status.message());
    match status.code() {
        Code::Unavailable | Code::ResourceExhausted | Code::DeadlineExceeded | Code::Aborted => {
            SendError::Retryable { cause, message }
        }
        _ => SendError::Fatal { cause, message },
    }
}
