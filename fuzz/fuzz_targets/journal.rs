//! AFL++ target: see `raidkit_fuzz::journal`.
fn main() {
    afl::fuzz!(|data: &[u8]| raidkit_fuzz::journal(data));
}
