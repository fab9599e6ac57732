//! Counts of the gRPC requests answered, by method and status code: a
//! tower layer in front of the gRPC services fills them, the metrics read
//! them.
//!
//! Owns the counts; it must not render metrics.

use std::{
    collections::BTreeMap,
    future::Future,
    pin::Pin,
    sync::{Arc, Mutex},
    task::{Context, Poll},
};

/// gRPC requests answered, by method (the request path's last part) and
/// status code. Cheap to clone.
#[derive(Clone, Debug, Default)]
pub struct RpcCounts(Arc<Mutex<BTreeMap<(String, &'static str), u64>>>);

impl RpcCounts {
    pub fn snapshot(&self) -> BTreeMap<(String, &'static str), u64> {
        crate::lock(&self.0).clone()
    }

    fn count(&self, method: String, code: &'static str) {
        *crate::lock(&self.0).entry((method, code)).or_default() += 1;
    }

    /// The tower layer that counts the requests of the services it wraps.
    pub fn layer(&self) -> CountRpcs {
        CountRpcs(self.clone())
    }
}

/// Counts each request by method and the status its response starts with
/// (a handler's error is sent at once, in the response's headers; a
/// stream's later end is not counted again).
#[derive(Clone, Debug)]
pub struct CountRpcs(RpcCounts);

impl<S> tower::Layer<S> for CountRpcs {
    type Service = CountedService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        CountedService {
            inner,
            counts: self.0.clone(),
        }
    }
}

#[derive(Clone, Debug)]
pub struct CountedService<S> {
    inner: S,
    counts: RpcCounts,
}

type Http<B> = tonic::codegen::http::Request<B>;
type HttpResponse<B> = tonic::codegen::http::Response<B>;

impl<S, B, R> tower::Service<Http<B>> for CountedService<S>
where
    S: tower::Service<Http<B>, Response = HttpResponse<R>>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Http<B>) -> Self::Future {
        let method = request
            .uri()
            .path()
            .rsplit('/')
            .next()
            .unwrap_or_default()
            .to_owned();
        let counts = self.counts.clone();
        let response = self.inner.call(request);
        Box::pin(async move {
            let response = response.await?;
            let code = response
                .headers()
                .get("grpc-status")
                .and_then(|value| value.to_str().ok())
                .and_then(|value| value.parse::<i32>().ok())
                .map_or("OK", code_name);
            counts.count(method, code);
            Ok(response)
        })
    }
}

/// The name of a gRPC status code, as Prometheus labels usually carry it.
fn code_name(code: i32) -> &'static str {
    match tonic::Code::from_i32(code) {
        tonic::Code::Ok => "OK",
        tonic::Code::Cancelled => "CANCELLED",
        tonic::Code::Unknown => "UNKNOWN",
        tonic::Code::InvalidArgument => "INVALID_ARGUMENT",
        tonic::Code::DeadlineExceeded => "DEADLINE_EXCEEDED",
        tonic::Code::NotFound => "NOT_FOUND",
        tonic::Code::AlreadyExists => "ALREADY_EXISTS",
        tonic::Code::PermissionDenied => "PERMISSION_DENIED",
        tonic::Code::ResourceExhausted => "RESOURCE_EXHAUSTED",
        tonic::Code::FailedPrecondition => "FAILED_PRECONDITION",
        tonic::Code::Aborted => "ABORTED",
        tonic::Code::OutOfRange => "OUT_OF_RANGE",
        tonic::Code::Unimplemented => "UNIMPLEMENTED",
        tonic::Code::Internal => "INTERNAL",
        tonic::Code::Unavailable => "UNAVAILABLE",
        tonic::Code::DataLoss => "DATA_LOSS",
        tonic::Code::Unauthenticated => "UNAUTHENTICATED",
    }
}
