//! The gzip of a pprof report, compressed on every core a report may use
//! while the report is encoded: compression is most of a big profile's
//! time (about 190 MB/s per core at the fastest level, against ~70 MB for a
//! sample per thread and stack of a busy machine's 10 minutes).
//!
//! The encoded bytes are cut into blocks of [`BLOCK`] bytes, each deflated
//! on its own and ended with a sync flush (so that it ends on a byte), and
//! the blocks are laid end to end in one gzip member, as `pigz` does: any
//! gzip reader reads it. The bytes depend only on what was encoded, never
//! on how many threads compressed it. Each block joins the member as soon
//! as the blocks before it did, so the compressed profile is held once.
//!
//! Owns the compressing threads and the gzip framing; it must not know
//! what the bytes are.

use std::{
    collections::BTreeMap,
    io::{self, Write},
    sync::{
        Arc, Mutex,
        mpsc::{Receiver, Sender, SyncSender, channel, sync_channel},
    },
    thread,
};

use flate2::{Compress, Compression, Crc, FlushCompress};

use super::super::{ReportError, parallel};

/// gzip's fastest level, as Go's own runtime/pprof writes profiles: on a
/// 70,000-stack profile 34 ms and 1.96 MB, against 206 ms and 1.29 MB at the
/// default level.
const GZIP_LEVEL: u32 = 1;

/// Bytes deflated as one piece. Each block starts without the window of
/// the one before: at 1 MiB that costs well under 1% of the size, and a
/// 15 MB profile still makes enough blocks to keep several cores busy.
const BLOCK: usize = 1 << 20;

/// Blocks waiting for a compressing thread, per thread: enough that one
/// never waits on the encoder that keeps ahead, few enough to hold little.
const BLOCKS_IN_FLIGHT_PER_THREAD: usize = 2;

/// The gzip header: no name, no time, the fastest level's flag (4), an
/// unknown system (255), as flate2's own encoder writes it.
const HEADER: [u8; 10] = [0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 4, 255];

/// The deflate stream's end: a last, empty block (fixed codes, end of block
/// only) after the blocks, each of which ended with a sync flush.
const LAST_EMPTY_BLOCK: [u8; 2] = [0x03, 0x00];

/// The gzip of what `encode` writes, compressed on up to as many threads as
/// a report uses as it is written; on this thread alone when no thread can
/// be started.
pub(super) fn gzip_alongside(
    encode: impl FnOnce(&mut dyn Write) -> Result<(), ReportError>,
) -> Result<Vec<u8>, ReportError> {
    gzip_on(parallel::most_workers(), encode)
}

/// [`gzip_alongside`] on at most `threads` compressing threads.
fn gzip_on(
    threads: usize,
    encode: impl FnOnce(&mut dyn Write) -> Result<(), ReportError>,
) -> Result<Vec<u8>, ReportError> {
    let (sender, blocks) =
        sync_channel::<(usize, Vec<u8>)>(threads.max(1) * BLOCKS_IN_FLIGHT_PER_THREAD);
    // Shared by the threads alone: once they all stopped, sending fails
    // instead of waiting for them.
    let blocks = Arc::new(Mutex::new(blocks));
    let (done_sender, done) = channel::<(usize, io::Result<Deflated>)>();
    thread::scope(|scope| {
        let started: Vec<_> = (0..threads)
            .filter_map(|_| {
                let (blocks, done_sender) = (Arc::clone(&blocks), done_sender.clone());
                let spawned = thread::Builder::new()
                    .name("pprof-gzip".to_owned())
                    .spawn_scoped(scope, move || deflate_each(&blocks, &done_sender));
                spawned.ok()
            })
            .collect();
        drop((blocks, done_sender));
        let mut writer = Blocks {
            block: Vec::with_capacity(BLOCK),
            numbered: 0,
            member: Member::new(),
            sink: match started.is_empty() {
                true => Sink::Here,
                false => Sink::Threads { sender, done },
            },
        };
        let encoded = encode(&mut writer).and_then(|()| Ok(writer.send_block()?));
        let Blocks {
            numbered,
            mut member,
            sink,
            ..
        } = writer;
        if let Sink::Threads { sender, done } = sink {
            // The threads stop after the last block.
            drop(sender);
            for (number, deflated) in done.iter() {
                member.add(number, deflated);
            }
            for thread in started {
                if thread.join().is_err() {
                    return Err(io::Error::other("a compressing thread panicked").into());
                }
            }
        }
        encoded?;
        Ok(member.finish(numbered)?)
    })
}

/// A block deflated, and the checksum of its bytes.
struct Deflated {
    bytes: Vec<u8>,
    crc: Crc,
}

/// Deflates the blocks the encoder sends until it stops sending.
fn deflate_each(
    blocks: &Mutex<Receiver<(usize, Vec<u8>)>>,
    done: &Sender<(usize, io::Result<Deflated>)>,
) {
    loop {
        // A poisoned lock is another thread's panic: stop, it is reported.
        let next = match blocks.lock() {
            Ok(blocks) => blocks.recv(),
            Err(_) => return,
        };
        let Ok((number, block)) = next else {
            return;
        };
        if done.send((number, deflate(&block))).is_err() {
            return;
        }
    }
}

/// A block deflated on its own, ended with a sync flush (an empty stored
/// block), so that the next block starts on a byte.
fn deflate(block: &[u8]) -> io::Result<Deflated> {
    let mut compress = Compress::new(Compression::new(GZIP_LEVEL), false);
    let mut bytes = Vec::with_capacity(block.len() / 2 + 1024);
    loop {
        // The block fits in memory, so its length fits in a usize.
        let read = compress.total_in() as usize;
        compress
            .compress_vec(&block[read..], &mut bytes, FlushCompress::Sync)
            .map_err(io::Error::other)?;
        // Room left after all was read: the flush is complete.
        if compress.total_in() as usize == block.len() && bytes.len() < bytes.capacity() {
            let mut crc = Crc::new();
            crc.update(block);
            return Ok(Deflated { bytes, crc });
        }
        bytes.reserve(bytes.capacity().max(4096));
    }
}

/// One gzip member, assembled as the deflated blocks arrive: each is
/// appended (and let go of) as soon as every block before it was, so that
/// the compressed profile is held once rather than as blocks and as the
/// member both.
struct Member {
    out: Vec<u8>,
    crc: Crc,
    /// Blocks deflated while one before them still was, by number.
    early: BTreeMap<usize, Deflated>,
    /// The number of the next block to append.
    next: usize,
    /// The first block that could not be deflated.
    error: Option<io::Error>,
}

impl Member {
    fn new() -> Self {
        Member {
            out: HEADER.to_vec(),
            crc: Crc::new(),
            early: BTreeMap::new(),
            next: 0,
            error: None,
        }
    }

    /// Adds block `number`, deflated.
    fn add(&mut self, number: usize, deflated: io::Result<Deflated>) {
        match deflated {
            Ok(deflated) => {
                self.early.insert(number, deflated);
            }
            Err(error) => {
                self.error.get_or_insert(error);
                return;
            }
        }
        while let Some(block) = self.early.remove(&self.next) {
            self.out.extend_from_slice(&block.bytes);
            self.crc.combine(&block.crc);
            self.next += 1;
        }
    }

    /// The member, once all `blocks` were added.
    fn finish(mut self, blocks: usize) -> io::Result<Vec<u8>> {
        if let Some(error) = self.error {
            return Err(error);
        }
        if self.next != blocks {
            return Err(io::Error::other(format!(
                "{} of {blocks} blocks were compressed",
                self.next
            )));
        }
        self.out.extend_from_slice(&LAST_EMPTY_BLOCK);
        self.out.extend_from_slice(&self.crc.sum().to_le_bytes());
        // gzip keeps the length modulo 2^32, as `amount` is.
        self.out.extend_from_slice(&self.crc.amount().to_le_bytes());
        Ok(self.out)
    }
}

/// Cuts what is written into numbered blocks of [`BLOCK`] bytes and hands
/// each, whole, to the compressing threads (or deflates it here), adding
/// those deflated to the member as they come back.
struct Blocks {
    block: Vec<u8>,
    /// Blocks sent so far.
    numbered: usize,
    member: Member,
    sink: Sink,
}

enum Sink {
    Threads {
        sender: SyncSender<(usize, Vec<u8>)>,
        done: Receiver<(usize, io::Result<Deflated>)>,
    },
    /// No thread could be started: the blocks are deflated on this one.
    Here,
}

impl Blocks {
    /// Sends the block being filled, if it holds anything.
    fn send_block(&mut self) -> io::Result<()> {
        if self.block.is_empty() {
            return Ok(());
        }
        let block = std::mem::replace(&mut self.block, Vec::with_capacity(BLOCK));
        let number = self.numbered;
        self.numbered += 1;
        match &mut self.sink {
            Sink::Threads { sender, done } => {
                sender.send((number, block)).map_err(|_| {
                    io::Error::new(
                        io::ErrorKind::BrokenPipe,
                        "the compressing threads stopped early",
                    )
                })?;
                for (number, deflated) in done.try_iter() {
                    self.member.add(number, deflated);
                }
            }
            Sink::Here => {
                let deflated = deflate(&block)?;
                self.member.add(number, Ok(deflated));
            }
        }
        Ok(())
    }
}

impl Write for Blocks {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        let mut rest = bytes;
        while !rest.is_empty() {
            let room = BLOCK - self.block.len();
            let (now, later) = rest.split_at(room.min(rest.len()));
            self.block.extend_from_slice(now);
            rest = later;
            if self.block.len() == BLOCK {
                self.send_block()?;
            }
        }
        Ok(bytes.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::io::Read as _;

    use flate2::read::GzDecoder;

    use super::*;
    use crate::report::test_support::Random;

    /// Bytes that compress somewhat, as an encoded profile does.
    fn bytes(len: usize) -> Vec<u8> {
        let mut random = Random::new(0x9e37_79b9_7f4a_7c15);
        (0..len)
            .map(|at| match at % 7 {
                0 => random.below(256) as u8,
                _ => (at % 251) as u8,
            })
            .collect()
    }

    fn gzip(threads: usize, data: &[u8], write_size: usize) -> Vec<u8> {
        gzip_on(threads, |out| {
            for piece in data.chunks(write_size.max(1)) {
                out.write_all(piece)?;
            }
            Ok(())
        })
        .expect("compresses")
    }

    fn gunzip(gzip: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        GzDecoder::new(gzip).read_to_end(&mut out).expect("gunzips");
        out
    }

    #[test]
    fn any_gzip_reader_reads_back_what_was_written() {
        for len in [0, 1, BLOCK - 1, BLOCK, BLOCK + 1, 3 * BLOCK + 12_345] {
            let data = bytes(len);
            let compressed = gzip(3, &data, 70_000);
            assert_eq!(gunzip(&compressed), data, "{len} bytes");
            // One member: the length and checksum at its end are the whole's.
            let tail = &compressed[compressed.len() - 8..];
            assert_eq!(tail[4..], (len as u32).to_le_bytes(), "{len} bytes");
        }
    }

    #[test]
    fn the_bytes_do_not_depend_on_threads_or_writes() {
        let data = bytes(2 * BLOCK + 777);
        let one = gzip(1, &data, BLOCK);
        assert_eq!(gzip(4, &data, 1000), one);
        assert_eq!(gzip(0, &data, 3 * BLOCK), one, "no thread: here");
        // Compressed in blocks costs little against one stream.
        let mut whole = flate2::write::GzEncoder::new(Vec::new(), Compression::new(GZIP_LEVEL));
        whole.write_all(&data).expect("compresses");
        let whole = whole.finish().expect("compresses");
        assert!(
            one.len() <= whole.len() + whole.len() / 50,
            "{} vs {}",
            one.len(),
            whole.len()
        );
    }

    #[test]
    fn blocks_are_appended_as_soon_as_those_before_them_are() {
        let data = bytes(3 * BLOCK);
        let deflated = || {
            data.chunks(BLOCK)
                .map(|block| deflate(block).expect("deflates"))
        };
        let mut in_order = Member::new();
        for (number, block) in deflated().enumerate() {
            in_order.add(number, Ok(block));
        }
        let mut blocks: Vec<_> = deflated().enumerate().collect();
        let mut member = Member::new();
        let (first, second, third) = (blocks.remove(0), blocks.remove(0), blocks.remove(0));
        member.add(2, Ok(third.1));
        member.add(1, Ok(second.1));
        assert_eq!(
            (member.next, member.early.len()),
            (0, 2),
            "held until 0 came"
        );
        member.add(0, Ok(first.1));
        assert_eq!(
            (member.next, member.early.len()),
            (3, 0),
            "all appended, none held"
        );
        let member = member.finish(3).expect("whole");
        assert_eq!(member, in_order.finish(3).expect("whole"));
        assert_eq!(gunzip(&member), data);

        let mut short = Member::new();
        short.add(0, deflate(&data[..10]));
        let missing = short.finish(2).expect_err("a block is missing");
        assert!(missing.to_string().contains("1 of 2 blocks"), "{missing}");
    }

    #[test]
    fn an_encoder_error_is_the_report_s() {
        let failed = gzip_on(2, |out| {
            out.write_all(&bytes(BLOCK + 5))?;
            Err(ReportError::InvalidProfile(
                "a stack of no sample".to_owned(),
            ))
        });
        assert!(
            matches!(failed, Err(ReportError::InvalidProfile(_))),
            "{failed:?}"
        );
    }
}
