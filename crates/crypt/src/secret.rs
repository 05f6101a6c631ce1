//! Where a key comes from: a key file (its bytes, whole), a passphrase file (its text without
//! the final newline), or a passphrase typed on the terminal.

use std::fmt;
use std::io::{self, IsTerminal, Read};
use std::path::{Path, PathBuf};

use zeroize::Zeroizing;

/// Largest key file read (LUKS reads at most 8 MiB; a random 4 KiB file is plenty).
pub const KEY_FILE_BYTES_MAX: u64 = 1 << 20;
/// Longest passphrase accepted, in bytes.
pub const PASSPHRASE_BYTES_MAX: usize = 4096;

/// Key material: zeroed when dropped, never printed.
pub struct Secret(Zeroizing<Vec<u8>>);

impl Secret {
    pub fn new(bytes: Vec<u8>) -> Secret {
        Secret(Zeroizing::new(bytes))
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Secret({} bytes)", self.0.len())
    }
}

/// Where to get a key or passphrase.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum KeySource {
    /// Every byte of the file is the key (1 byte to 1 MiB).
    KeyFile(PathBuf),
    /// The file's text is the passphrase; one final newline (`\n` or `\r\n`) is not part of it.
    PassphraseFile(PathBuf),
    /// Asked for on the terminal (standard input must be one).
    Prompt,
}

impl fmt::Display for KeySource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KeySource::KeyFile(p) => write!(f, "key file {}", p.display()),
            KeySource::PassphraseFile(p) => write!(f, "passphrase file {}", p.display()),
            KeySource::Prompt => f.write_str("the passphrase typed"),
        }
    }
}

impl KeySource {
    /// From the command line's `--key-file` and `--passphrase-file` (at most one of them;
    /// neither: a prompt).
    pub fn from_args(key_file: Option<&Path>, passphrase_file: Option<&Path>) -> KeySource {
        match (key_file, passphrase_file) {
            (Some(k), _) => KeySource::KeyFile(k.to_path_buf()),
            (None, Some(p)) => KeySource::PassphraseFile(p.to_path_buf()),
            (None, None) => KeySource::Prompt,
        }
    }

    /// Reads the secret. `prompt` is what the terminal shows; with `confirm` a typed
    /// passphrase is asked twice and must match (a new key).
    pub fn read(&self, prompt: &str, confirm: bool) -> io::Result<Secret> {
        match self {
            KeySource::KeyFile(path) => read_key_file(path),
            KeySource::PassphraseFile(path) => read_passphrase_file(path),
            KeySource::Prompt => read_prompt(prompt, confirm),
        }
    }
}

fn invalid(why: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, why)
}

fn read_key_file(path: &Path) -> io::Result<Secret> {
    let named =
        |e: io::Error| io::Error::new(e.kind(), format!("key file {}: {e}", path.display()));
    let file = std::fs::File::open(path).map_err(named)?;
    let mut bytes = Zeroizing::new(Vec::new());
    file.take(KEY_FILE_BYTES_MAX + 1)
        .read_to_end(&mut bytes)
        .map_err(named)?;
    if bytes.is_empty() || bytes.len() as u64 > KEY_FILE_BYTES_MAX {
        return Err(invalid(format!(
            "key file {}: {} bytes; a key file holds 1 byte to 1 MiB (e.g. `head -c 64 \
             /dev/urandom > FILE`)",
            path.display(),
            match bytes.is_empty() {
                true => "0".to_string(),
                false => "more than 1 MiB".to_string(),
            }
        )));
    }
    Ok(Secret::new(std::mem::take(&mut *bytes)))
}

fn read_passphrase_file(path: &Path) -> io::Result<Secret> {
    let named =
        |e: io::Error| io::Error::new(e.kind(), format!("passphrase file {}: {e}", path.display()));
    let file = std::fs::File::open(path).map_err(named)?;
    let mut bytes = Zeroizing::new(Vec::new());
    file.take(PASSPHRASE_BYTES_MAX as u64 + 2)
        .read_to_end(&mut bytes)
        .map_err(named)?;
    if bytes.ends_with(b"\n") {
        bytes.pop();
        if bytes.ends_with(b"\r") {
            bytes.pop();
        }
    }
    check_passphrase(bytes.len(), &format!("passphrase file {}", path.display()))?;
    Ok(Secret::new(std::mem::take(&mut *bytes)))
}

fn check_passphrase(len: usize, what: &str) -> io::Result<()> {
    if len == 0 || len > PASSPHRASE_BYTES_MAX {
        return Err(invalid(format!(
            "{what}: the passphrase is {} bytes; it must be 1 to {PASSPHRASE_BYTES_MAX}",
            len
        )));
    }
    Ok(())
}

fn read_prompt(prompt: &str, confirm: bool) -> io::Result<Secret> {
    if !io::stdin().is_terminal() {
        return Err(invalid(format!(
            "{prompt}: standard input is not a terminal, so no passphrase can be asked for: \
             give --key-file FILE or --passphrase-file FILE"
        )));
    }
    let first = Zeroizing::new(rpassword::prompt_password(format!("{prompt}: "))?);
    check_passphrase(first.len(), "the passphrase typed")?;
    if confirm {
        let again = Zeroizing::new(rpassword::prompt_password("Type it again: ")?);
        if *again != *first {
            return Err(invalid("the two passphrases typed differ".into()));
        }
    }
    Ok(Secret::new(first.as_bytes().to_vec()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_are_read_as_documented_and_bad_ones_refused_by_name() {
        let dir = tempfile::tempdir().unwrap();
        let path = |n: &str| dir.path().join(n);
        std::fs::write(path("pass"), b"hunter2\r\n").unwrap();
        std::fs::write(path("key"), b"\x00binary\n").unwrap();
        std::fs::write(path("empty"), b"").unwrap();
        std::fs::write(path("newline"), b"\n").unwrap();
        let pass = KeySource::PassphraseFile(path("pass"))
            .read("p", false)
            .unwrap();
        assert_eq!(pass.as_bytes(), b"hunter2");
        let key = KeySource::KeyFile(path("key")).read("k", false).unwrap();
        assert_eq!(key.as_bytes(), b"\x00binary\n", "a key file is taken whole");
        let e = KeySource::KeyFile(path("empty"))
            .read("k", false)
            .unwrap_err();
        assert!(
            e.to_string().contains("empty") && e.to_string().contains("0 bytes"),
            "{e}"
        );
        let e = KeySource::PassphraseFile(path("newline"))
            .read("p", false)
            .unwrap_err();
        assert!(e.to_string().contains("newline"), "{e}");
        let e = KeySource::KeyFile(path("missing"))
            .read("k", false)
            .unwrap_err();
        assert!(e.to_string().contains("missing"), "{e}");
        std::fs::write(path("big"), vec![1u8; KEY_FILE_BYTES_MAX as usize + 1]).unwrap();
        let e = KeySource::KeyFile(path("big"))
            .read("k", false)
            .unwrap_err();
        assert!(e.to_string().contains("more than 1 MiB"), "{e}");
    }
}
