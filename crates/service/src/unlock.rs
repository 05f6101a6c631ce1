//! Unlocking an encrypted array before it is assembled: the key areas of its members'
//! superblocks, the key from where the operator said, the data cipher for the stack's
//! encryption layer (`crypt::Encrypted`).

use std::sync::Arc;

use anyhow::{bail, Context};
use crypt::{DataCipher, KeyArea, KeySource, UnlockError};
use member::Member;

/// The cipher of the array on `members` (the freshest superblock's array), opened with the
/// key from `key`; `Ok(None)` for an array without encryption. Refused: an encrypted array
/// without a key, a key no slot of any member accepts, a key file or passphrase file given
/// for an array that is not encrypted (the operator expects encryption: serving plaintext
/// instead would hide the mistake). A key typed at a prompt is only asked for when needed.
/// `how`: where a key is given, for the message (the flags, or the configuration keys).
pub fn unlock(
    members: &[Arc<dyn Member>],
    key: Option<&KeySource>,
    how: &str,
) -> anyhow::Result<Option<DataCipher>> {
    let read: Vec<ondisk::Superblock> = members
        .iter()
        .filter_map(|m| ondisk::read_superblock(m.as_ref()).ok())
        .collect();
    let Some(freshest) = read.iter().max_by_key(|sb| sb.events) else {
        return Ok(None); // assembly says why it cannot start
    };
    let name = format!("array \"{}\" ({})", freshest.name, freshest.array_uuid);
    let Some(area) = &freshest.encryption else {
        if let Some(source @ (KeySource::KeyFile(_) | KeySource::PassphraseFile(_))) = key {
            bail!(
                "{name} is not encrypted, but a key was given ({source}): refusing to serve it \
                 as plaintext; leave the key out to serve it"
            );
        }
        return Ok(None);
    };
    let Some(source) = key else {
        bail!("{name} is encrypted: give its key ({how})");
    };
    // The freshest member's slots first, then any other member's that differ (a key command
    // cut short may have rewritten only some members); all wrap the same data key.
    let mut areas: Vec<&KeyArea> = vec![area];
    for sb in &read {
        if let Some(other) = &sb.encryption {
            if sb.array_uuid == freshest.array_uuid
                && other.same_key(area)
                && !areas.contains(&other)
            {
                areas.push(other);
            }
        }
    }
    let secret = source
        .read(&format!("Passphrase for {name}"), false)
        .with_context(|| format!("cannot read the key of {name}"))?;
    let mut wrong = None;
    for area in areas {
        match area.unlock(&secret) {
            Ok((key, _slot)) => return Ok(Some(DataCipher::new(&key))),
            Err(e @ UnlockError::WrongKey { .. }) => wrong = Some(e),
            Err(e) => return Err(e).with_context(|| format!("cannot unlock {name}")),
        }
    }
    let e = wrong.expect("at least one key area was tried");
    Err(anyhow::Error::new(e)).with_context(|| format!("cannot unlock {name} with {source}"))
}
