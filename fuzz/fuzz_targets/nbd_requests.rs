//! AFL++ target: see `raidkit_fuzz::nbd_requests`.
fn main() {
    afl::fuzz!(|data: &[u8]| raidkit_fuzz::nbd_requests(data));
}
