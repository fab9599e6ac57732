//! The gRPC API (v1), for dashboards and for profilerctl: a thin shim over
//! the service. Each handler learns who asks (the socket's peer
//! credentials, or a client of the TCP listener past mutual TLS), turns its
//! message into the service's request (`convert`), calls the service, and
//! turns the answer or the error back into a reply or a status.
//!
//! It owns nothing but that translation; it must not decide what a request
//! may do (see `service`), touch the store or the kernel.

mod convert;
mod status;

use std::{sync::Arc, time::Duration};

use tonic::{Request, Response, Status};

use crate::profile::unix_nanos;
use crate::proto::v1::{self, profiler_server::Profiler};
use crate::service::{
    AllocsSpec, ProfileSpec, Service, ServiceError, TopSpec,
    access::{Asker, CallerKey, Credentials, TrustedRemote},
};

pub use crate::proto::v1::profiler_server::ProfilerServer;

/// The `Profiler` gRPC service over a [`Service`].
pub struct GrpcApi {
    service: Arc<Service>,
}

impl GrpcApi {
    pub fn new(service: Arc<Service>) -> Self {
        Self { service }
    }

    /// Who sent `request`: a client over TCP that passed mutual TLS (which
    /// sees everything), a local user over plaintext loopback TCP (by who
    /// opened the connection, as `loopback` finds it), or a local process
    /// by the Unix socket's credentials.
    fn asker<T>(&self, request: &Request<T>) -> Result<Asker, Status> {
        if request.extensions().get::<TrustedRemote>().is_some() {
            return Ok(Asker {
                caller: crate::service::access::Caller::Root,
                key: CallerKey::Remote,
            });
        }
        if let Some(tcp) = request
            .extensions()
            .get::<tonic::transport::server::TcpConnectInfo>()
        {
            let (Some(client), Some(server)) = (tcp.remote_addr(), tcp.local_addr()) else {
                return Err(Status::permission_denied(
                    "permission denied: the connection's addresses are unknown",
                ));
            };
            // A netlink request and, for users other than root, a look
            // through their processes: a few milliseconds.
            let credentials = tokio::task::block_in_place(|| {
                crate::transport::loopback::credentials(client, server)
            })
            .map_err(Status::permission_denied)?;
            return Ok(self
                .service
                .access()
                .asker(Some(credentials))
                .map_err(ServiceError::from)?);
        }
        let credentials = request
            .extensions()
            .get::<tonic::transport::server::UdsConnectInfo>()
            .and_then(|info| info.peer_cred)
            .map(|cred| Credentials {
                uid: cred.uid(),
                gid: cred.gid(),
                pid: cred.pid().and_then(|pid| u32::try_from(pid).ok()),
            });
        Ok(self
            .service
            .access()
            .asker(credentials)
            .map_err(ServiceError::from)?)
    }
}

/// A service stream as a gRPC one: its items turned into messages.
fn stream_of<T: Send + 'static, M: Send + 'static>(
    mut items: tokio::sync::mpsc::Receiver<Result<T, ServiceError>>,
    message: fn(T) -> M,
) -> tokio_stream::wrappers::ReceiverStream<Result<M, Status>> {
    let (sender, stream) = tokio::sync::mpsc::channel(1);
    tokio::spawn(async move {
        loop {
            tokio::select! {
                () = sender.closed() => return,
                item = items.recv() => {
                    let Some(item) = item else { return };
                    if sender.send(item.map(message).map_err(Status::from)).await.is_err() {
                        return;
                    }
                }
            }
        }
    });
    tokio_stream::wrappers::ReceiverStream::new(stream)
}

#[tonic::async_trait]
impl Profiler for GrpcApi {
    async fn profile(
        &self,
        request: Request<v1::ProfileRequest>,
    ) -> Result<Response<v1::ProfileReply>, Status> {
        let asker = self.asker(&request)?;
        let request = request.into_inner();
        let spec = ProfileSpec {
            duration: Duration::from_millis(request.duration_ms),
            selector: convert::selector(request.selector),
            mode: convert::profile_mode(request.mode)?,
            options: convert::report_options(request.options)?,
            cut_token: (!request.cut_token.is_empty()).then_some(request.cut_token),
            frequency_hz: (request.frequency_hz != 0).then_some(request.frequency_hz),
        };
        let report = self.service.profile(asker, spec).await?;
        Ok(Response::new(convert::profile_reply(report)))
    }

    async fn cut_profile(
        &self,
        request: Request<v1::CutProfileRequest>,
    ) -> Result<Response<v1::CutProfileReply>, Status> {
        let asker = self.asker(&request)?;
        let cut = self
            .service
            .cut_profile(asker, &request.into_inner().cut_token)?;
        Ok(Response::new(v1::CutProfileReply { cut }))
    }

    async fn start_profile(
        &self,
        request: Request<v1::StartProfileRequest>,
    ) -> Result<Response<v1::StartProfileReply>, Status> {
        let asker = self.asker(&request)?;
        let request = request.into_inner();
        let mode = convert::profile_mode(request.mode)?;
        let started = self
            .service
            .start_session(
                asker,
                convert::selector(request.selector),
                mode,
                request.children,
            )
            .await?;
        Ok(Response::new(v1::StartProfileReply {
            session_id: started.id,
            start_unix_nanos: unix_nanos(started.start),
        }))
    }

    async fn stop_profile(
        &self,
        request: Request<v1::StopProfileRequest>,
    ) -> Result<Response<v1::ProfileReply>, Status> {
        let asker = self.asker(&request)?;
        let request = request.into_inner();
        let options = convert::report_options(request.options)?;
        let report = self
            .service
            .stop_session(asker, &request.session_id, request.force, options)
            .await?;
        Ok(Response::new(convert::profile_reply(report)))
    }

    async fn allocs(
        &self,
        request: Request<v1::AllocsRequest>,
    ) -> Result<Response<v1::ProfileReply>, Status> {
        let asker = self.asker(&request)?;
        let request = request.into_inner();
        let spec = AllocsSpec {
            pid: request.pid,
            duration: Duration::from_millis(request.duration_ms),
            sampling: convert::alloc_sampling(request.sampling),
            options: convert::report_options(request.options)?,
            inuse: request.inuse,
            cut_token: (!request.cut_token.is_empty()).then_some(request.cut_token),
        };
        let report = self.service.allocs(asker, spec).await?;
        Ok(Response::new(convert::profile_reply(report)))
    }

    async fn start_allocs(
        &self,
        request: Request<v1::StartAllocsRequest>,
    ) -> Result<Response<v1::StartProfileReply>, Status> {
        let asker = self.asker(&request)?;
        let request = request.into_inner();
        let started = self
            .service
            .start_allocs(
                asker,
                request.pid,
                convert::alloc_sampling(request.sampling),
            )
            .await?;
        Ok(Response::new(v1::StartProfileReply {
            session_id: started.id,
            start_unix_nanos: unix_nanos(started.start),
        }))
    }

    async fn stop_allocs(
        &self,
        request: Request<v1::StopAllocsRequest>,
    ) -> Result<Response<v1::ProfileReply>, Status> {
        let asker = self.asker(&request)?;
        let request = request.into_inner();
        let options = convert::report_options(request.options)?;
        let report = self
            .service
            .stop_allocs(asker, &request.session_id, options, request.inuse)
            .await?;
        Ok(Response::new(convert::profile_reply(report)))
    }

    async fn list_sessions(
        &self,
        request: Request<v1::ListSessionsRequest>,
    ) -> Result<Response<v1::ListSessionsReply>, Status> {
        let asker = self.asker(&request)?;
        let sessions = self
            .service
            .list_sessions(asker)
            .into_iter()
            .map(|(id, session)| convert::session_info(id, &session))
            .collect();
        Ok(Response::new(v1::ListSessionsReply { sessions }))
    }

    async fn query(
        &self,
        request: Request<v1::QueryRequest>,
    ) -> Result<Response<v1::ProfileReply>, Status> {
        let asker = self.asker(&request)?;
        let request = request.into_inner();
        let window = convert::past_window(request.start_unix_nanos, request.end_unix_nanos)?;
        let (mode, options) = (
            convert::profile_mode(request.mode)?,
            convert::report_options(request.options)?,
        );
        let selector = convert::selector(request.selector);
        let report = self
            .service
            .query(asker, window, selector, mode, options)
            .await?;
        Ok(Response::new(convert::profile_reply(report)))
    }

    async fn get_status(
        &self,
        request: Request<v1::GetStatusRequest>,
    ) -> Result<Response<v1::StatusReply>, Status> {
        let asker = self.asker(&request)?;
        let mut status = status::status(self.service.status(asker));
        if request.into_inner().metrics {
            status.metrics = self.service.metrics();
        }
        Ok(Response::new(status))
    }

    async fn callers(
        &self,
        request: Request<v1::CallersRequest>,
    ) -> Result<Response<v1::CallersReply>, Status> {
        let asker = self.asker(&request)?;
        let request = request.into_inner();
        let window = convert::past_window(request.start_unix_nanos, request.end_unix_nanos)?;
        let callers = self
            .service
            .callers(
                asker,
                window,
                convert::selector(request.selector),
                request.function,
            )
            .await?;
        Ok(Response::new(convert::callers_reply(callers)))
    }

    async fn diff(
        &self,
        request: Request<v1::DiffRequest>,
    ) -> Result<Response<v1::DiffReply>, Status> {
        let asker = self.asker(&request)?;
        let spec = convert::diff_spec(request.into_inner())?;
        let diff = self.service.diff(asker, spec).await?;
        Ok(Response::new(convert::diff_reply(diff)))
    }

    async fn peek(
        &self,
        request: Request<v1::PeekRequest>,
    ) -> Result<Response<v1::PeekReport>, Status> {
        let asker = self.asker(&request)?;
        let report = self.service.peek(asker, request.into_inner().pid).await?;
        Ok(Response::new(convert::peek_report(&report)))
    }

    async fn list_peeks(
        &self,
        request: Request<v1::ListPeeksRequest>,
    ) -> Result<Response<v1::ListPeeksReply>, Status> {
        let asker = self.asker(&request)?;
        let peeks = self
            .service
            .list_peeks(asker)
            .into_iter()
            .map(convert::peek_summary)
            .collect();
        Ok(Response::new(v1::ListPeeksReply { peeks }))
    }

    async fn get_peek(
        &self,
        request: Request<v1::GetPeekRequest>,
    ) -> Result<Response<v1::PeekReport>, Status> {
        let asker = self.asker(&request)?;
        let report = self.service.get_peek(asker, &request.into_inner().id)?;
        Ok(Response::new(convert::peek_report(&report)))
    }

    async fn set_targets(
        &self,
        request: Request<v1::SetTargetsRequest>,
    ) -> Result<Response<v1::Targets>, Status> {
        let asker = self.asker(&request)?;
        let set = convert::target_set(request.into_inner())?;
        let targets = self.service.set_targets(asker, set)?;
        Ok(Response::new(convert::targets(&targets)))
    }

    type WatchPeeksStream = tokio_stream::wrappers::ReceiverStream<Result<v1::PeekReport, Status>>;

    async fn watch_peeks(
        &self,
        request: Request<v1::WatchPeeksRequest>,
    ) -> Result<Response<Self::WatchPeeksStream>, Status> {
        let asker = self.asker(&request)?;
        let reports = self.service.watch_peeks(asker)?;
        Ok(Response::new(stream_of(reports, |report| {
            convert::peek_report(&report)
        })))
    }

    type TopStream = tokio_stream::wrappers::ReceiverStream<Result<v1::TopUpdate, Status>>;

    async fn top(
        &self,
        request: Request<v1::TopRequest>,
    ) -> Result<Response<Self::TopStream>, Status> {
        let asker = self.asker(&request)?;
        let request = request.into_inner();
        let spec = TopSpec {
            selector: convert::selector(request.selector),
            interval: (request.interval_ms > 0).then(|| Duration::from_millis(request.interval_ms)),
            limit: (request.limit > 0).then_some(request.limit as usize),
            kernel: !request.user_only,
            mode: convert::profile_mode(request.mode)?,
        };
        let updates = self.service.top(asker, spec)?;
        Ok(Response::new(stream_of(updates, convert::top_update)))
    }
}
