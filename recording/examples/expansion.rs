//! How much recordings expand when read: `cargo run -p leakscope-recording
//! --example expansion -- FILE.lsrec...` prints, per file, its size, what its
//! frames decompress to, and the ratio, which the reader's decoding budget
//! (`leakscope_recording::reader::decode_budget`) must stay far above.

fn main() {
    for path in std::env::args().skip(1) {
        let path = std::path::Path::new(&path);
        let mut reader = match leakscope_recording::RecordingReader::open(path) {
            Ok(reader) => reader,
            Err(e) => {
                eprintln!("{e}");
                continue;
            }
        };
        let records = reader.by_ref().count();
        let size = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
        let decoded = reader.decoded_bytes();
        println!(
            "{}: {records} records, {size} B decompressed to {decoded} B: {:.1}x",
            path.display(),
            decoded as f64 / size.max(1) as f64
        );
    }
}
