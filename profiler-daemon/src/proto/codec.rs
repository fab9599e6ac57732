//! The API's protobuf codec: prost's, except that a message that does not
//! decode is the sender's fault (INVALID_ARGUMENT), not the daemon's
//! (prost's codec says INTERNAL). The generated server uses it (see
//! build.rs).

use std::marker::PhantomData;

use prost::Message;
use tonic::{
    Code, Status,
    codec::{BufferSettings, Codec, DecodeBuf, Decoder},
};
use tonic_prost::{ProstCodec, ProstEncoder};

/// A [`Codec`] for `application/grpc+proto` whose decoding errors are
/// INVALID_ARGUMENT.
#[derive(Debug, Clone)]
pub struct ApiCodec<T, U> {
    prost: ProstCodec<T, U>,
}

impl<T, U> Default for ApiCodec<T, U> {
    fn default() -> Self {
        Self {
            prost: ProstCodec::default(),
        }
    }
}

impl<T, U> Codec for ApiCodec<T, U>
where
    T: Message + Send + 'static,
    U: Message + Default + Send + 'static,
{
    type Encode = T;
    type Decode = U;
    type Encoder = ProstEncoder<T>;
    type Decoder = ApiDecoder<U>;

    fn encoder(&mut self) -> Self::Encoder {
        self.prost.encoder()
    }

    fn decoder(&mut self) -> Self::Decoder {
        ApiDecoder {
            prost: self.prost.decoder(),
            _message: PhantomData,
        }
    }
}

/// prost's decoder, with its errors made INVALID_ARGUMENT.
#[derive(Debug, Clone)]
pub struct ApiDecoder<U> {
    prost: tonic_prost::ProstDecoder<U>,
    _message: PhantomData<U>,
}

impl<U: Message + Default> Decoder for ApiDecoder<U> {
    type Item = U;
    type Error = Status;

    fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> Result<Option<U>, Status> {
        self.prost
            .decode(buf)
            .map_err(|status| match status.code() {
                Code::Internal => Status::invalid_argument(format!(
                    "the request is not a valid {} message: {}; check that the client uses \
                 profilerd's .proto files",
                    std::any::type_name::<U>()
                        .rsplit("::")
                        .next()
                        .unwrap_or("protobuf"),
                    status.message()
                )),
                _ => status,
            })
    }

    fn buffer_settings(&self) -> BufferSettings {
        self.prost.buffer_settings()
    }
}
