//! Why a request failed, once for every protocol: each kind maps to one
//! gRPC status code and one HTTP status (the transports' `grpc::convert`
//! and `http::routes` map them).

use crate::{
    allocs::AllocsError,
    kernel::{allocs::ProbeError, families::FamilyError},
    peek::PeekError,
    pipeline::PipelineError,
    service::{access::AccessError, sessions::SessionError},
};

#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    #[error("{0}")]
    InvalidArgument(String),
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    PermissionDenied(String),
    #[error("{0}")]
    ResourceExhausted(String),
    #[error("{0}")]
    FailedPrecondition(String),
    #[error(transparent)]
    Unavailable(#[from] PipelineError),
    /// The daemon is shutting down.
    #[error("{}", crate::service::stopping::MESSAGE)]
    Stopping,
    #[error("{0}")]
    Internal(String),
}

impl ServiceError {
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::InvalidArgument(message.into())
    }
}

impl From<AccessError> for ServiceError {
    fn from(err: AccessError) -> Self {
        match err {
            AccessError::NoSuchProcess(_) => Self::NotFound(err.to_string()),
            _ => Self::PermissionDenied(err.to_string()),
        }
    }
}

impl From<SessionError> for ServiceError {
    fn from(err: SessionError) -> Self {
        match err {
            SessionError::TooMany { .. }
            | SessionError::Reserved { .. }
            | SessionError::TooManyForCaller { .. } => Self::ResourceExhausted(err.to_string()),
            SessionError::Unknown(_) => Self::NotFound(err.to_string()),
            SessionError::NotYours(_) => Self::PermissionDenied(err.to_string()),
        }
    }
}

impl From<FamilyError> for ServiceError {
    fn from(err: FamilyError) -> Self {
        match err {
            FamilyError::Unavailable(_) => Self::FailedPrecondition(err.to_string()),
            FamilyError::AlreadyFollowed(_) => Self::InvalidArgument(err.to_string()),
            FamilyError::Map { .. } => Self::Internal(err.to_string()),
        }
    }
}

impl From<PeekError> for ServiceError {
    fn from(err: PeekError) -> Self {
        let message = err.to_string();
        match err {
            PeekError::NoProcess(_) => Self::NotFound(message),
            PeekError::NotAllowed { .. } => Self::InvalidArgument(message),
            PeekError::TooMany { .. }
            | PeekError::Busy { .. }
            | PeekError::TooManyOfUser { .. }
            | PeekError::TooOften { .. } => Self::ResourceExhausted(message),
            PeekError::Sampling { .. } | PeekError::Report(_) | PeekError::Stopped => {
                Self::Internal(message)
            }
        }
    }
}

impl From<AllocsError> for ServiceError {
    fn from(err: AllocsError) -> Self {
        use crate::symbols::allocator_functions::AllocatorError;
        let message = err.to_string();
        match err {
            AllocsError::Allocator(AllocatorError::NoProcess(_)) => Self::NotFound(message),
            AllocsError::Allocator(AllocatorError::NoAllocator { .. }) => {
                Self::FailedPrecondition(message)
            }
            AllocsError::Probes(ProbeError::Unavailable(_)) => Self::FailedPrecondition(message),
            AllocsError::Probes(
                ProbeError::Busy(_) | ProbeError::TooMany | ProbeError::Reserved { .. },
            ) => Self::ResourceExhausted(message),
            AllocsError::Allocator(AllocatorError::Maps { .. })
            | AllocsError::Probes(ProbeError::Attach { .. } | ProbeError::Target { .. }) => {
                Self::Internal(message)
            }
            AllocsError::Stopped => Self::Stopping,
        }
    }
}
