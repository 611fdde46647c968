//! The bytes a scrape sends, made once per published snapshot and only when first asked for:
//! the page in each text format, and its gzip form.
//!
//! A scrape's body is the shared page plus a small tail rendered at scrape time (the sample
//! age and the HTTP counters). Compressing the whole body per scrape cost about eight times as
//! much CPU as sending it plain, so the page is deflated once: into raw DEFLATE blocks ending on
//! a byte boundary (a sync flush), with its CRC-32 kept. A gzip scrape then deflates only the
//! tail as the final blocks and writes one valid gzip member: header, the shared blocks, the
//! tail's blocks, and the trailer with the CRC-32 continued over the tail (the tail's blocks
//! never refer back into the page, so the concatenation decodes as one stream).

use std::io::Write as _;
use std::sync::OnceLock;

use bytes::Bytes;
use flate2::write::DeflateEncoder;
use flate2::Compression;

/// A gzip member header: magic, DEFLATE, no flags, no time, no extra flags, unknown OS.
const GZIP_HEADER: [u8; 10] = [0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff];

/// One format's page, with its compressed form made on first use.
#[derive(Debug)]
pub struct Page {
    /// The page as text.
    pub plain: Bytes,
    deflated: OnceLock<Deflated>,
}

/// The page as raw DEFLATE blocks without a final block, and the CRC-32 of the plain page.
#[derive(Debug)]
struct Deflated {
    blocks: Bytes,
    crc: u32,
}

impl Page {
    /// A page of `text`.
    pub fn new(text: String) -> Self {
        Page {
            plain: Bytes::from(text),
            deflated: OnceLock::new(),
        }
    }

    /// The gzip body of the page followed by `tail`, as two parts to send in order: the first
    /// is shared by every scrape of this page, the second is made for this one.
    pub fn gzip_with(&self, tail: &[u8]) -> [Bytes; 2] {
        let deflated = self.deflated.get_or_init(|| {
            let mut encoder = DeflateEncoder::new(
                Vec::with_capacity(self.plain.len() / 8),
                Compression::fast(),
            );
            // Writing into a Vec cannot fail; flush ends the blocks on a byte boundary.
            let _ = encoder
                .write_all(&self.plain)
                .and_then(|()| encoder.flush());
            let mut blocks = std::mem::take(encoder.get_mut());
            let mut head = GZIP_HEADER.to_vec();
            head.append(&mut blocks);
            Deflated {
                blocks: Bytes::from(head),
                crc: crc32fast::hash(&self.plain),
            }
        });
        let mut encoder = DeflateEncoder::new(Vec::with_capacity(256), Compression::fast());
        let _ = encoder.write_all(tail);
        let mut end = encoder.finish().unwrap_or_default();
        let mut crc =
            crc32fast::Hasher::new_with_initial_len(deflated.crc, self.plain.len() as u64);
        crc.update(tail);
        end.extend_from_slice(&crc.finalize().to_le_bytes());
        // ISIZE: the uncompressed length modulo 2^32.
        let length = (self.plain.len() + tail.len()) as u32;
        end.extend_from_slice(&length.to_le_bytes());
        [deflated.blocks.clone(), Bytes::from(end)]
    }
}

#[cfg(test)]
mod tests {
    use std::io::Read as _;

    use super::*;

    fn gunzip(parts: &[Bytes]) -> Vec<u8> {
        let body = parts.concat();
        let mut out = Vec::new();
        flate2::read::GzDecoder::new(&body[..])
            .read_to_end(&mut out)
            .expect("a valid gzip member");
        out
    }

    #[test]
    fn the_shared_blocks_and_each_tail_decode_as_one_gzip_member() {
        let text: String = (0..5000)
            .map(|i| format!("gpu_series{{i=\"{i}\"}} {i}\n"))
            .collect();
        let page = Page::new(text.clone());
        for tail in ["age 0.5\n", "age 1.25\n# EOF\n", ""] {
            let parts = page.gzip_with(tail.as_bytes());
            assert_eq!(gunzip(&parts), format!("{text}{tail}").into_bytes());
        }
        // The page is compressed once and shared by every scrape of it.
        let first = page.gzip_with(b"a")[0].clone();
        assert_eq!(first.as_ptr(), page.gzip_with(b"b")[0].as_ptr());
        assert!(first.len() < text.len() / 4);
    }

    #[test]
    fn an_empty_page_still_makes_a_valid_member() {
        let page = Page::new(String::new());
        assert_eq!(gunzip(&page.gzip_with(b"tail\n")), b"tail\n");
    }
}
