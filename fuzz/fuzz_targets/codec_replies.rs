//! AFL++ target: see `raidkit_fuzz::codec_replies`.
fn main() {
    afl::fuzz!(|data: &[u8]| raidkit_fuzz::codec_replies(data));
}
