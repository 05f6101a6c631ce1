//! AFL++ target: see `raidkit_fuzz::nbd_handshake`.
fn main() {
    afl::fuzz!(|data: &[u8]| raidkit_fuzz::nbd_handshake(data));
}
