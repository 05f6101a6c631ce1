//! Every committed input (`corpus/TARGET/`: the seeds, and each input that once crashed a
//! target) runs through its target without the fuzzer: a quick replay that needs no AFL++.

use std::path::Path;

#[test]
fn every_committed_input_runs_clean() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut ran = 0;
    for (name, target) in raidkit_fuzz::TARGETS {
        let dir = root.join("corpus").join(name);
        let entries = std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        for entry in entries {
            let path = entry.expect("corpus entry").path();
            let bytes = std::fs::read(&path).expect("read input");
            eprintln!("{name}: {}", path.display());
            target(&bytes);
            ran += 1;
        }
    }
    assert!(
        ran >= raidkit_fuzz::TARGETS.len(),
        "only {ran} inputs found"
    );
}
